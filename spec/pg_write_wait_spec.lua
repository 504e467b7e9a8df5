-- A row held locked by another PostgreSQL session (`BEGIN; SELECT ... FOR UPDATE;` in psql, left
-- open) that mend's own writes need: a worker's batch waits for it in tries of 2 s and
-- lands once it goes (nothing lost, nothing twice) while mend serve goes on answering reads and
-- its log names the run and the session; a repair's writes after its look are bounded as the
-- look is; a statement_timeout set on the role cuts none of it short (mend's sessions set their
-- own timeouts). They waited for ever, or failed on the role's timeout. Every command runs
-- under `timeout`, so that a wait without end fails the test. Needs the test cluster
-- (MEND_TEST_PG); pending without it. About 25 s of the PostgreSQL suite.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"

local q, sh = H.quote, H.shell

local it_pg = H.PG and it or pending

local PGH = require "spec.support.pg_hold"
local hold, release_all = PGH.hold, PGH.release

-- `curl` under a 10 s bound: the status (0: no answer) and the seconds it took.
local function get_timed(base, path)
  local t0 = H.wall()
  local rc, out = sh(("curl -s -m 10 -o /dev/null -w '%%{http_code}' %s"):format(q(base .. path)))
  return tonumber(out) or 0, H.wall() - t0, rc
end

local function start_wait(dir, db)
  local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
  assert.are.equal(0, rc, err)
  return out:match("(%S+)")
end

describe("a row mend writes locked by another PostgreSQL session", function()
  local bound, unbound = PGH.bound_mend(40)
  setup(bound)
  teardown(unbound)
  after_each(function()
    release_all()
    if H.PG then H.sql(H.PG, "ALTER ROLE CURRENT_USER RESET statement_timeout") end
    S.stop_all()
    H.cleanup()
  end)

  it_pg("a worker's batch waits for it, reads are answered meanwhile, the log names it, and the writes land once", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db, nil, "worker")
    local code, body = S.post(base, "/api/v1/runs", { workflow = "wait", input = {} })
    assert.are.equal(201, code)
    local id = body.id
    H.wait_for("serve to hold the run", function() return H.status_json(db, id).owner ~= nil end, 10)
    local name = hold(dir, db, ("SELECT id FROM runs WHERE id = '%s' FOR UPDATE"):format(id))
    local rc, out, err = H.mend_in(nil, db, "signal " .. id .. " payment --data '{\"amount\":5}'")
    assert.are.equal(0, rc, out .. err)
    local log = function() return (H.read(dir .. "/serve.out") or "") .. (H.read(dir .. "/serve.err") or "") end
    local named = "run " .. id .. " is locked by session %d+ %(" .. name:gsub("%-", "%%-") .. "%)"
    local ok = pcall(H.wait_for, "the log to name it", function() return log():find(named) ~= nil end, 15)
    assert(ok, "the log did not name the run and the session: " .. log())
    for _, path in ipairs({ "/api/v1/runs/" .. id, "/api/v1/runs", "/api/v1/runs/" .. id .. "/history" }) do
      local code, took = get_timed(base, path)
      assert.are.equal(200, code, path .. " was not answered while the batch waits")
      assert.is_true(took < 3, path .. " took " .. took)
    end
    assert.are.equal("running", H.status_json(db, id).status)   -- nothing of the batch yet
    release_all()
    ok = pcall(H.wait_for, "the run", function() return H.status_json(db, id).status == "succeeded" end, 15)
    assert(ok, "the run did not succeed: " .. H.status_json(db, id).status .. "\n" .. log())
    local st = H.status_json(db, id)
    for _, step in ipairs(st.steps) do
      assert.are.equal(1, step.attempts or 1, step.name)
    end
    rc, out = H.mend_in(nil, db, "history " .. id .. " --json")
    assert.are.equal(0, rc, out)
    local completed = 0
    for _, h in ipairs(require("mend").json.decode(out)) do
      if h.step == "ship" and h.to == "succeeded" then completed = completed + 1 end
    end
    assert.are.equal(1, completed, out)
    assert.matches("lock is gone", log())
  end)

  it_pg("a repair's writes after its look give up as the look does when a dead letter's row is held", function()
    local dir, db = S.workspace()
    local id = S.dead_letter(dir, db)
    hold(dir, db, ("SELECT run_id FROM dlq WHERE run_id = '%s' FOR UPDATE"):format(id))
    local t0 = H.wall()
    local rc, out, err = H.mend_in(nil, db, "dlq resolve " .. id .. " --note 'by hand'")
    assert.are_not.equal(124, rc, "it waited for the lock without end")
    assert.are.equal(1, rc, out .. err)
    assert.matches("a row of table dlq is locked by another session %(waited 5%.0 s", err)
    assert.is_true(H.wall() - t0 < 20)
    release_all()
    assert.are.equal("needs_attention", H.status_json(db, id).status)
    rc, out, err = H.mend_in(nil, db, "dlq resolve " .. id .. " --note 'by hand'")
    assert.are.equal(0, rc, out .. err)
  end)

  it_pg("a statement_timeout on the role cuts no wait short: a look gives up on its own bound", function()
    local dir, db = S.workspace()
    local id = start_wait(dir, db)
    H.sql(H.PG, "ALTER ROLE CURRENT_USER SET statement_timeout = '1s'")
    hold(dir, db, ("SELECT id FROM runs WHERE id = '%s' FOR UPDATE"):format(id))
    local t0 = H.wall()
    local rc, out, err = H.mend_in(nil, db, "cancel " .. id)
    local took = H.wall() - t0
    assert.are.equal(1, rc, out .. err)
    assert.matches("run " .. id .. " is locked by another session %(waited 5%.0 s%)", err)
    assert.is_true(took >= 4.5 and took < 20, "took " .. took)
    release_all()
    rc, out, err = H.mend_in(nil, db, "cancel " .. id)
    assert.are.equal(0, rc, out .. err)
  end)
end)
