-- A worker whose batch waits for a row or a table another PostgreSQL session holds answers
-- every request in a bounded time (done, or refused 503 naming the lock before anything of it
-- is recorded), and a SIGTERM stops it within seconds: never the loop frozen, nothing waiting
-- without end (src/store/pg/pg_wait.c, src/engine/lock.c).
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local PGH = require "spec.support.pg_hold"
local json = require("mend").json

local it_pg = H.PG and it or pending

describe("a PostgreSQL worker whose batch waits for another session's lock", function()
  local bound, unbound = PGH.bound_mend(60)
  setup(bound)
  teardown(unbound)
  after_each(PGH.clean_up)

  it_pg("answers a start and an event to another run within 10 s (503 or done)", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local other = out:match("(%S+)")
    local base, _, id = PGH.batch_waits(dir, db)
    local start = S.post_later(dir, base, "/api/v1/runs", { workflow = "wait", input = {} }, "start")
    local event = S.post_later(dir, base, "/api/v1/runs/" .. other .. "/events",
                               { name = "payment", data = { amount = 1 } }, "event")
    local said, bad = {}, false
    for _, name in ipairs({ "start", "event" }) do
      local code, body, took = (name == "start" and start or event)()
      said[#said + 1] = ("%s: code %s after %.1f s %s"):format(name, tostring(code), took, json.encode(body or {}))
      bad = bad or code == 0 or took >= 10
      -- held back by the lock with nothing recorded: said so with a code, not a message
      if code == 503 then
        assert.are.equal("busy", body.error.code, name .. ": " .. json.encode(body))
      end
    end
    -- an event answered 503 must not be sent all the same once the lock goes
    local event_code = event()
    PGH.release()
    H.wait_for("the held run", function() return H.status_json(db, id).status == "succeeded" end, 20)
    -- a start answered now is in a batch committed after every one that waited for the lock:
    -- what those wrote is in the store
    assert.are.equal(201, (S.post(base, "/api/v1/runs", { workflow = "wait", input = {} })))
    local _, inbox = S.get(base, "/api/v1/runs/" .. other .. "/events")
    print("event answered " .. tostring(event_code) .. "; the other run's inbox after the lock went: " .. json.encode(inbox))
    if event_code == 503 then
      assert.are.equal(0, #(inbox.events or inbox), "an event answered 503 was sent all the same: " .. json.encode(inbox))
    end
    assert(not bad, "unanswered while the batch waits: " .. table.concat(said, "; "))
  end)
  -- A connection lost while a table is locked: the reconnect's and the side connection's
  -- prepares wait for the table's lock no longer than the store's opening does, and a lock met
  -- then is a reconnect-later: the worker answers (a read refused 503 meanwhile: the
  -- connection is not back) and a stop ends it.
  it_pg("a lost connection while a table is locked: the loop answers and SIGTERM stops it in 10 s", function()
    local dir, db = S.workspace()
    local base, pid = S.start(dir, db, nil, "worker")
    assert.are.equal(200, (S.get(base, "/api/v1")))
    PGH.hold(dir, db, "LOCK TABLE history IN SHARE MODE")
    H.sql(db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'mend'")
    -- a write, so that the loop or the writer needs the connection again: its reconnect meets
    -- the table's lock (the worker's log says so)
    S.post_later(dir, base, "/api/v1/runs", { workflow = "wait", input = {} }, "start")
    H.wait_for("the reconnect to meet the lock", function()
      return S.log(dir):find("prepare statements: table history is locked", 1, true) ~= nil
    end, 30)
    local _, out = H.shell(("curl -s -m 5 -o /dev/null -w '%%{http_code}' %s"):format(H.quote(base .. "/api/v1")))
    local root = tonumber(out) or 0
    _, out = H.shell(("curl -s -m 5 -o /dev/null -w '%%{http_code}' %s"):format(H.quote(base .. "/api/v1/runs")))
    local health = tonumber(out) or 0
    for _, l in ipairs(H.sql(db, "SELECT application_name || ' ' || wait_event_type || ' ' || left(query, 80) FROM pg_stat_activity WHERE application_name = 'mend' AND wait_event_type = 'Lock'")) do
      print("waiting for a lock: " .. l)
    end
    if os.getenv("REV_BT") then
      os.execute("gdb -p " .. pid .. " -batch -ex 'thread apply all bt' 2>/dev/null | grep -E '^#|^Thread' | cut -c1-160 | head -60")
    end
    local t0 = H.wall()
    H.shell("kill -TERM " .. pid)
    local ok = pcall(H.wait_for, "the worker to end", function()
      return not os.execute("kill -0 " .. pid .. " 2>/dev/null")
    end, 15)
    local took = H.wall() - t0
    print(("GET /api/v1: %d, GET /api/v1/runs: %d, SIGTERM ended it: %s after %.1f s"):format(root, health, tostring(ok), took))
    assert.is_true(root == 200, "GET /api/v1 unanswered (" .. root .. ") after a lost connection under LOCK TABLE: " .. S.log(dir))
    assert.is_true(health == 200 or health == 503, "GET /api/v1/runs unanswered (" .. health .. ") after a lost connection under LOCK TABLE: " .. S.log(dir))
    assert(ok, "SIGTERM did not stop the worker in 15 s: " .. S.log(dir))
    assert.is_true(took < 10, "the stop took " .. took)
  end)

  -- A run's children are read as the run is, a view: the committed rows, not a wait for the
  -- batch's lock (a read that waited would be 503).
  it_pg("answers GET /api/v1/runs/{id}, its children included, at once", function()
    local dir, db = S.workspace()
    local base, _, id = PGH.batch_waits(dir, db)
    for _, path in ipairs{ "/api/v1/runs/" .. id, "/api/v1/runs/" .. id .. "?wait=0" } do
      local _, out = H.shell(("curl -s -m 8 -o /dev/null -w '%%{http_code} %%{time_total}' %s")
        :format(H.quote(base .. path)))
      local code, t = out:match("(%d+) ([%d.]+)")
      assert.are.equal("200", code, path .. ": " .. out)
      assert.is_true(tonumber(t) < 3, path .. ": " .. out)
    end
    PGH.release()
  end)
end)
