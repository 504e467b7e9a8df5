-- mend copy (issue 20): a SQLite store with finished, failed, waiting and dead-lettered runs
-- moved into a new PostgreSQL database, and read back there through mend status, history and
-- dlq, as a person who moved their workers would. Needs the test cluster (MEND_TEST_PG:
-- tests/pg/cluster.sh run, as ctest's busted_specs_pg_* do); pending without it. The source
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

  it("refuses a source that is not a database, naming it", function()
    -- the query of its schema version was finalized twice: a bus error (exit 135)
    local dir = H.tmp_dir()
    local notdb = H.write_file(dir, "notdb.db", "hello")
    local rc, out = mend("copy", "--from", notdb, "--to", "postgresql://127.0.0.1:1/x")
    assert.are.equal(1, rc, out)
    assert.truthy(out:find(notdb .. ": file is not a database", 1, true), out)
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
    -- the kinds of the steps' errors, with what a restart acts on beside them (half's severity 3)
    local kinds = "SELECT run_id || ' ' || name || ' ' || error_kind || ' ' || error_severity"
      .. " || ' ' || error_stopped FROM steps WHERE error_kind IS NOT NULL ORDER BY run_id, idx"
    assert.is_true(#H.sql(src, kinds) > 0)
    assert.are.same(H.sql(src, kinds), H.sql(to, kinds))
    assert.are.same({ ids.half .. " ship compensable 3 0" },
                    H.sql(to, (kinds:gsub("WHERE", "WHERE run_id = '" .. ids.half .. "' AND"))))

    -- a second copy into the same store is refused, and adds nothing
    rc, out = mend("copy", "--from", src, "--to", to)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("not empty", 1, true), out)
    assert.are.same({ "4" }, H.sql(to, "SELECT count(*) FROM runs"))
  end)

  -- A file made before schema 16 keeps run_key's UNIQUE column until mend db upgrade: either
  -- layout copies alike, and a key stays taken on PostgreSQL.
  it_pg("copies a file of either run-key layout, its keys still taken", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "ok.lua", WORKFLOWS["ok.lua"])
    for _, layout in ipairs{ "column", "partial" } do
      local src = dir .. "/" .. layout .. ".db"
      local rc, out = mend("run", dir .. "/ok.lua", "--clock", "virtual", "--db", src,
                           "--key", "k1")
      assert.are.equal(0, rc, out)
      assert.are.equal(0, (mend("run", dir .. "/ok.lua", "--clock", "virtual", "--db", src)))
      if layout == "column" then H.runs_key_column(src) end
      assert.are.same({ layout },
                      H.sql(src, "SELECT value FROM meta WHERE key = 'runs_key_layout'"))
      local k1 = H.sql(src, "SELECT id FROM runs WHERE run_key = 'k1'")[1]
      local to = H.new_db()
      rc, out = mend("copy", "--from", src, "--to", to, "--json")
      assert.are.equal(0, rc, out)
      assert.are.equal(2, json.decode(out:match("(%b{})%s*$")).runs)
      assert.are.same({ k1 }, H.sql(to, "SELECT id FROM runs WHERE run_key = 'k1'"))
      rc, out = mend("run", dir .. "/ok.lua", "--clock", "virtual", "--db", to, "--key", "k1")
      assert.are.equal(0, rc, out)
      assert.truthy(out:find("names the existing run " .. k1, 1, true), out)
      assert.are.same({ "2" }, H.sql(to, "SELECT count(*) FROM runs"))
    end
  end)

  -- A run waiting for its token and a parent waiting for its child, moved while they wait:
  -- the token and the links come along, and workers on PostgreSQL finish both.
  it_pg("moves runs that wait for a token and for a child run, which end on PostgreSQL",
        function()
    local dir = H.tmp_dir()
    local src, log = dir .. "/src.db", dir .. "/worker.log"
    H.write_file(dir, "ask.lua", [[return { name = "ask", steps = {
      { name = "approve", wait = "token", timeout = 3600,
        execute = function(ctx) ctx:log("token %s", ctx:token()) end } } }]])
    H.write_file(dir, "kid.lua", [[return { name = "kid", steps = {
      { name = "pickup", wait_for = "picked_up" } } }]])
    H.write_file(dir, "parent.lua", [[return { name = "parent", steps = {
      { name = "ship", child = "kid" },
      { name = "done", execute = function(ctx) return ctx.results.ship end } } }]])
    local function start(db, name)
      local rc, out = mend("start", name, "--workflows", dir, "--db", db)
      assert.are.equal(0, rc, out)
      return out:match("(%w+)%s*$")
    end
    local function worker(db)
      local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 2>>%s'"
        .. " >/dev/null & echo $!"):format(H.quote(H.MEND), H.quote(db), H.quote(dir),
        H.quote(log)))
      local pid = p:read("l")
      p:close()
      return pid
    end
    local function status(db, id)
      local rc, out = mend("status", id, "--db", db, "--json")
      assert.are.equal(0, rc, out)
      return json.decode(out)
    end
    local ask, parent = start(src, "ask"), start(src, "parent")
    local pid = worker(src)
    local kid
    H.wait_for("both waits", function()
      local c = status(src, parent).children
      kid = c and c[1] and c[1].run_id
      return kid and H.step(status(src, kid), "pickup").status == "waiting"
        and H.step(status(src, ask), "approve").status == "waiting"
    end, 10)
    H.stop_worker(pid)
    -- the token as the step handed it out (to the worker's log); the store has its digest
    local token = H.read(log):match("token (mtk_%x+)")
    assert.truthy(token)
    local digest = H.sql(src, ("SELECT digest FROM tokens WHERE run_id = '%s'"):format(ask))[1]
    assert.are.equal(64, #digest)

    local to = H.new_db()
    local rc, out = mend("copy", "--from", src, "--to", to, "--json")
    assert.are.equal(0, rc, out)
    local counts = json.decode(out:match("(%b{})%s*$"))
    assert.are.equal(3, counts.runs)
    assert.are.equal(1, counts.tokens)
    assert.are.same({ digest }, H.sql(to, "SELECT digest FROM tokens"))
    assert.are.equal(parent, status(to, kid).parent_run)
    assert.are.equal(kid, status(to, parent).children[1].run_id)

    rc, out = mend("complete", token, "--result", '"yes"', "--db", to)
    assert.are.equal(0, rc, out)
    rc, out = mend("signal", kid, "picked_up", "--data", '{"by":"van"}', "--db", to)
    assert.are.equal(0, rc, out)
    pid = worker(to)
    local rc1, out1 = mend("wait", ask, "--timeout", "10", "--db", to)
    local rc2, out2 = mend("wait", parent, "--timeout", "10", "--db", to)
    H.stop_worker(pid)
    assert.are.equal(0, rc1, out1 .. H.read(log))
    assert.are.equal(0, rc2, out2 .. H.read(log))
    assert.are.equal("yes", H.step(status(to, ask), "approve").result)
    assert.are.same({ pickup = { by = "van" } }, H.step(status(to, parent), "done").result)
  end)
end)
