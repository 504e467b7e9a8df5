-- mend copy (issue 20): a SQLite store with finished, failed, waiting and dead-lettered runs
-- moved into a new PostgreSQL database, and read back there through mend status, history and
-- dlq, as a person who moved their workers would. Needs the test cluster (MEND_TEST_PG:
-- tests/pg/cluster.sh run, as ctest's busted_specs_pg does); pending without it. The source
-- is a SQLite file by construction, whatever backend the run is for.

local json = require("mend").json
local H = require "spec.helper"

local function mend(...)
  local words = {}
  for i, a in ipairs({ ... }) do words[i] = H.quote(a) end
  return H.shell(H.quote(H.MEND) .. " " .. table.concat(words, " ") .. " 2>&1")
end

local WORKFLOWS = {
  ["ok.lua"] = [[return { name = "ok", steps = {
    { name = "one", execute = function() return { n = 1, s = "a\tb" } end } } }]],
  ["bad.lua"] = [[local mend = require "mend"
    return { name = "bad", steps = {
    { name = "only", execute = function() error(mend.fatal("card declined")) end } } }]],
  ["half.lua"] = [[local mend = require "mend"
    return { name = "half", steps = {
    { name = "ship", execute = function()
        error(mend.compensable("half shipped", { severity = 3 })) end } } }]],
}

describe("mend copy", function()
  after_each(H.cleanup)

  it("refuses a target that is not PostgreSQL, and a source that is not there", function()
    local dir = H.tmp_dir()
    local rc, out = mend("copy", "--from", dir .. "/none.db", "--to", "postgresql://x/y")
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("no database", 1, true), out)
    rc, out = mend("copy", "--from", H.tmp_db(), "--to", dir .. "/b.db")
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("PostgreSQL URI", 1, true), out)
    rc, out = mend("copy", "--to", "postgresql://x/y")
    assert.are.equal(2, rc, out)
  end)

  local it_pg = H.PG and it or pending

  it_pg("says a wrong password is wrong, naming the server and not the password", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "ok.lua", WORKFLOWS["ok.lua"])
    local src = dir .. "/src.db"
    local rc, out = mend("run", dir .. "/ok.lua", "--clock", "virtual", "--db", src)
    assert.are.equal(0, rc, out)
    local wrong = H.pg_wrong_password(H.new_db():match("/([%w_]+)$"))
    rc, out = mend("copy", "--from", src, "--to", wrong)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("127.0.0.1", 1, true), out)
    assert.truthy(out:find("password", 1, true), out)
    assert.falsy(out:find("not-the-password", 1, true), out)
  end)
  it_pg("copies every kind of run, which mend status, history and dlq read back on PostgreSQL",
        function()
    local dir = H.tmp_dir()
    local src = dir .. "/src.db"
    for name, text in pairs(WORKFLOWS) do H.write_file(dir, name, text) end
    local ids = {}
    local function run(file, want_rc)
      local rc, out = mend("run", dir .. "/" .. file, "--clock", "virtual", "--db", src, "--json",
                           "--log-level", "error")
      assert.are.equal(want_rc, rc, out)
      return json.decode(out:match("(%b{})%s*$")).id
    end
    ids.ok = run("ok.lua", 0)
    ids.bad = run("bad.lua", 3)
    ids.half = run("half.lua", 4)
    local rc, out = mend("start", dir .. "/ok.lua", "--db", src)   -- waiting for a worker
    assert.are.equal(0, rc, out)
    ids.waiting = out:match("(%w+)%s*$")

    local want = {}
    for k, id in pairs(ids) do
      local _, st = mend("status", id, "--db", src, "--json")
      local _, hist = mend("history", id, "--db", src, "--json")
      want[k] = { status = json.decode(st), history = json.decode(hist) }
    end
    local _, dlq = mend("dlq", "--db", src, "--json")

    local to = H.new_db()
    rc, out = mend("copy", "--from", src, "--to", to, "--json")
    assert.are.equal(0, rc, out)
    local counts = json.decode(out:match("(%b{})%s*$"))
    assert.are.equal(4, counts.runs)
    assert.are.equal(1, counts.dlq)
    assert.are.equal(3, counts.workflow_versions)

    for k, id in pairs(ids) do
      local _, st = mend("status", id, "--db", to, "--json")
      local _, hist = mend("history", id, "--db", to, "--json")
      assert.are.same(want[k].status, json.decode(st), k)
      assert.are.same(want[k].history, json.decode(hist), k)
    end
    local _, dlq_pg = mend("dlq", "--db", to, "--json")
    assert.are.same(json.decode(dlq), json.decode(dlq_pg))

    -- a second copy into the same store is refused, and adds nothing
    rc, out = mend("copy", "--from", src, "--to", to)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("not empty", 1, true), out)
    assert.are.same({ "4" }, H.sql(to, "SELECT count(*) FROM runs"))
  end)
end)
