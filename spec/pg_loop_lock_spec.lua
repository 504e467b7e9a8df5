-- While a batch of mend serve / mend worker waits for a row another PostgreSQL session holds
-- (`BEGIN; SELECT ... FOR UPDATE;` in psql, left open), the loop goes on answering: health,
-- metrics, pages of runs and another run's status at once; a cancel of another run, parked or
-- held, is answered in a bounded time (503 naming the lock, or done); a stop (SIGTERM) ends
-- the process in a few seconds, saying what was not written, and that batch is done once after
-- a restart. The loop froze: its reads on the connection waited for the writer thread's batch,
-- and the stop's drain waited for it too. Needs the test cluster (MEND_TEST_PG); pending
-- without it.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local PGH = require "spec.support.pg_hold"
local json = require("mend").json

local q, sh = H.quote, H.shell
local it_pg = H.PG and it or pending

-- `curl` under a 10 s bound: the status (0: no answer) and the seconds it took.
local function get_timed(base, path)
  local t0 = H.wall()
  local _, out = sh(("curl -s -m 10 -o /dev/null -w '%%{http_code}' %s"):format(q(base .. path)))
  return tonumber(out) or 0, H.wall() - t0
end

local function answered_meanwhile(base, id)
  for _, path in ipairs({ "/api/v1", "/metrics", "/api/v1/runs", "/api/v1/dlq", "/api/v1/runs/" .. id }) do
    local code, took = get_timed(base, path)
    assert.is_true(code == 200, path .. " was not answered while the batch waits: " .. code)
    assert.is_true(took < 3, path .. " took " .. took)
  end
end

describe("a batch of mend serve waiting for another PostgreSQL session's lock", function()
  local bound, unbound = PGH.bound_mend(60)
  setup(bound)
  teardown(unbound)
  after_each(PGH.clean_up)

  it_pg("a cancel of a parked dead letter and of another run are answered, and the loop answers meanwhile", function()
    local dir, db = S.workspace()
    local dead = S.dead_letter(dir, db)
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local other = out:match("(%S+)")
    local base, _, id = PGH.batch_waits(dir, db, "worker")
    local cancel_dead = S.post_later(dir, base, "/api/v1/runs/" .. dead .. "/cancel", {}, "cancel-dead")
    local cancel_other = S.post_later(dir, base, "/api/v1/runs/" .. other .. "/cancel", {}, "cancel-other")
    os.execute("sleep 0.5")
    answered_meanwhile(base, other)
    for _, answer in ipairs({ cancel_dead, cancel_other }) do
      local code, body, took = answer()
      assert.are.equal(503, code, json.encode(body or {}))
      assert.is_true(took < 5, "the cancel took " .. took)
      assert.matches("run " .. id .. " is locked by session %d+ %(mend%-hold%-1%-.*nothing of this cancel"
                     .. " was written", body.error.message)
    end
    answered_meanwhile(base, other)
    PGH.release()
    H.wait_for("the run", function() return H.status_json(db, id).status == "succeeded" end, 15)
    local code = S.post(base, "/api/v1/runs/" .. other .. "/cancel", {})
    assert.is_truthy(code == 200 or code == 202 or code == 409, code)
  end)

  it_pg("SIGTERM stops a worker in a few seconds, says what was not written, and a restart does it once", function()
    local dir, db = S.workspace()
    local _, pid, id = PGH.batch_waits(dir, db, "worker")
    local t0 = H.wall()
    sh("kill -TERM " .. pid)
    local ok = pcall(H.wait_for, "the worker to end", function()
      return not os.execute("kill -0 " .. pid .. " 2>/dev/null")
    end, 15)
    local took = H.wall() - t0
    assert(ok, "SIGTERM did not stop the worker: " .. S.log(dir))
    assert.is_true(took < 10, "the stop took " .. took)
    assert.matches("not written", S.log(dir))
    PGH.release()
    assert.are.equal("running", H.status_json(db, id).status)
    S.start(dir, db, nil, "worker")
    ok = pcall(H.wait_for, "the run", function() return H.status_json(db, id).status == "succeeded" end, 30)
    assert(ok, "the run did not succeed after the restart: " .. S.log(dir))
    local rc, out = H.mend_in(nil, db, "history " .. id .. " --json")
    assert.are.equal(0, rc, out)
    local completed = 0
    for _, h in ipairs(json.decode(out)) do
      if h.step == "ship" and h.to == "succeeded" then completed = completed + 1 end
    end
    assert.are.equal(1, completed, out)
  end)

  -- Preparing mend's statements takes each table's lock for writing: a table locked by hand
  -- held every open back without end (mend status, mend worker), mend's session having no
  -- lock_timeout of its own.
  it_pg("opening the store while a table is locked fails in a few seconds naming the table and the session", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local name = PGH.hold(dir, db, "LOCK TABLE history IN SHARE MODE")
    for _, args in ipairs({ "status " .. id, "runs", "worker --listen 127.0.0.1:0 --workflows " .. q(dir) }) do
      local t0 = H.wall()
      rc, out, err = H.mend_in(nil, db, args)
      local took = H.wall() - t0
      print(("mend %s under LOCK TABLE: exit %s after %.1f s"):format(args:match("^%S+"), tostring(rc), took))
      assert.are_not.equal(124, rc, args .. ": it waited for the lock without end")
      assert.are.equal(1, rc, args .. ": " .. out .. err)
      assert.matches("table history is locked by session %d+ %(" .. name:gsub("%-", "%%-") .. "%)", err)
      assert.matches("try again once it is gone", err)
      assert.is_true(took < 15, args .. " took " .. took)
    end
    PGH.release()
    rc, out, err = H.mend_in(nil, db, "status " .. id)
    assert.are.equal(0, rc, out .. err)
  end)
end)
