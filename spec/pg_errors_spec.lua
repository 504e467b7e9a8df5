-- PostgreSQL's errors as a person reads them: libpq's message on one line, every host's cause
-- kept. A URI of several hosts (which the store supports, src/store/pg/pg.c) has libpq tell
-- each host's failure in turn: the first ("port 1 failed: Connection refused") says nothing of
-- the server that answered and refused the password. PostgreSQL only (MEND_TEST_PG).
local H = require "spec.helper"
local it_pg = H.PG and it or pending

describe("a URI of several hosts, the one that answers refusing the password (PostgreSQL)", function()
  it_pg("mend's error names the password refused, not only the first host's refusal", function()
    local bad = H.pg_wrong_password("mend"):gsub("@([^/:]+):(%d+)/", "@%1:1,%1:%2/")
    assert.matches(":1,", bad)
    local rc, out, err = H.mend_in(nil, bad, "dlq")
    assert.are.equal(1, rc, out .. err)
    assert.matches("password authentication failed", err)
  end)
end)

-- A command that only reads (status, history, runs, dlq) opens one session: its check that
-- mend's schema is there is the engine's open's own (it logged in a second time for a look
-- first). Counted in the server's log: tests/pg/cluster.sh logs each login with its
-- application_name, which the test's URI makes its own.
describe("a read-only command on PostgreSQL", function()
  after_each(H.cleanup)
  local STATE = os.getenv("MEND_TEST_PG_STATE")
  local WF = 'return { name = "w", steps = { { name = "a", execute = function() return 1 end } } }'

  local function logins(tag)
    local n = 0
    for line in io.lines(H.read(STATE .. "/datadir"):match("%S+") .. "/server.log") do
      if line:find("connection authorized: .*application_name=" .. tag .. "$") then n = n + 1 end
    end
    return n
  end

  local function tagged(db, tag)
    return db .. (db:find("?", 1, true) and "&" or "?") .. "application_name=" .. tag
  end

  it_pg("logs in once", function()
    if not STATE then return pending("needs tests/pg/cluster.sh run (MEND_TEST_PG_STATE)") end
    local db, dir = H.new_db(), H.tmp_dir()
    H.write_file(dir, "w.lua", WF)
    local rc, out = H.mend_cmd(db, "start w --workflows " .. H.quote(dir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%w+)%s*$")
    local tag = ("one_login_%d_%d"):format(os.time(), math.random(1e6))
    for _, cmd in ipairs { "status " .. id, "history " .. id, "runs", "dlq" } do
      local before = logins(tag)
      rc, out = H.mend_cmd(tagged(db, tag), cmd)
      assert.are.equal(0, rc, out)
      assert.are.equal(before + 1, logins(tag), "mend " .. cmd .. " logged in more than once")
    end
  end)

  it_pg("refuses a schema without mend's tables, naming the database, and makes none", function()
    local db = H.new_db()
    local rc, out = H.mend_cmd(db, "runs")
    assert.are.equal(1, rc, out)
    assert.matches("^mend: [^\n]*: no mend database there %(no mend schema%)\n$", out)
    assert.not_matches("@", out)   -- the URI's password is not shown
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM pg_tables"
                                      .. " WHERE schemaname = current_schema()"))
  end)
end)
