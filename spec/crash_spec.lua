-- Crash tests: real `mend worker` processes on a real database, killed with SIGKILL at random
-- moments and at chosen failpoints (before and after commits, inside execute and compensate),
-- restarted, and audited against an external service that dedupes by idempotency key.
--
-- MEND_CRASH_CYCLES sets the number of kill/restart cycles (default 200; `make crash-soak`
-- runs thousands).
local H = require "spec.helper"
local mend = require "mend"
local C = require "spec.support.crash_harness"

local CYCLES = tonumber(os.getenv("MEND_CRASH_CYCLES") or "200")
local FAILPOINTS = { "before_commit", "after_commit", "execute", "compensate" }

local sh, sleep, alive, start_worker, kill9, stop = C.sh, C.sleep, C.alive, C.start_worker, C.kill9, C.stop
local submit, new_setup, settle, audit = C.submit, C.new_setup, C.settle, C.audit

-- SQLite only: busted_crash runs this file against a database file (it checks the file with
-- PRAGMA integrity_check); the crash harness on PostgreSQL (issue 20) is spec/pg_crash_spec.lua.
describe("a worker killed with SIGKILL", function()
  after_each(H.cleanup)

  it("leaves every run finished, every effect applied exactly once, across " .. CYCLES .. " kill/restart cycles", function()
    local db, dir, log, client, ids = new_setup(0)
    local n = 0
    local t0 = H.wall()
    math.randomseed(tonumber(os.getenv("MEND_CRASH_SEED") or "7"))
    local kills = { random = 0 }
    -- A worker that dies at `point` (its nth time there), or is killed after `wait` seconds.
    local function cycle(point, nth, wait)
      for _ = 1, 2 do n = n + 1; ids[#ids + 1] = submit(client, dir, n) end
      local env = point and string.format("MEND_FAILPOINT=%s:%d", point, nth)
      local pid = start_worker(db, env, log)
      if point then
        local until_t = H.wall() + wait
        while alive(pid) and H.wall() < until_t do sleep(0.005) end
        kills[point] = (kills[point] or 0) + (alive(pid) and 0 or 1)
      else
        sleep(math.random() * 0.06)
        kills.random = kills.random + 1
      end
      kill9(pid)
    end
    for c = 1, CYCLES do
      if c % 3 == 0 then
        cycle(FAILPOINTS[(c // 3) % #FAILPOINTS + 1], math.random(1, 12), 0.2)
      else
        cycle(nil)
      end
    end
    -- A slow build (sanitizers) may not reach a failpoint within 0.2 s: such a point gets more
    -- cycles, with more time, until a worker dies there.
    for _, point in ipairs(FAILPOINTS) do
      for _ = 1, 10 do
        if (kills[point] or 0) > 0 then break end
        cycle(point, 1, 3)
      end
    end
    local t_settle = H.wall()
    assert.are.equal(0, settle(db, client, ids, log))
    t_settle = H.wall() - t_settle
    local counts = audit(db, client, ids, dir)
    print(string.format("\n  %d runs, %d cycles in %.1fs, settled in %.1fs: %s; kills %s", #ids,
      CYCLES, H.wall() - t0, t_settle, mend.json.encode(counts), mend.json.encode(kills)))
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
    for _, point in ipairs(FAILPOINTS) do
      assert.is_truthy((kills[point] or 0) > 0, "no kill at failpoint " .. point)
    end
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

describe("two workers on one database", function()
  after_each(H.cleanup)

  it("never execute a run at the same time, and finish every run while either is killed", function()
    local db, dir, log, client, ids = new_setup(120)
    local a, b = start_worker(db, nil, log), start_worker(db, nil, log)
    math.randomseed(11)
    for round = 1, 12 do
      sleep(0.03 + math.random() * 0.05)
      if round % 2 == 0 then kill9(a); a = start_worker(db, nil, log)
      else kill9(b); b = start_worker(db, nil, log) end
      for n = 1, 5 do ids[#ids + 1] = submit(client, dir, 1000 * round + n) end
    end
    stop(a)
    stop(b)
    assert.are.equal(0, settle(db, client, ids, log))
    audit(db, client, ids, dir)
    -- both workers did some of the work
    local workers = {}
    for _, id in ipairs(ids) do
      for _, h in ipairs(client:history(id)) do
        if h.event == "claimed" or h.event == "recovered" then workers[h.worker] = true end
      end
    end
    local count = 0
    for _ in pairs(workers) do count = count + 1 end
    assert.is_truthy(count >= 3)
  end)
end)

describe("a worker stopped past its lease", function()
  after_each(H.cleanup)

  -- SIGSTOP freezes a worker with attempts in flight and writes recorded; its leases run out
  -- and a second worker takes 20 of its runs. Woken up, the first must not write one row to a
  -- run it lost, nor start an attempt of one: it lets them go and goes on with the runs it
  -- still holds.
  it("writes nothing to the runs another worker took, and drops them", function()
    local db, dir, log, client, ids = new_setup(400)
    local a = start_worker(db, nil, log)
    -- a frozen worker holds some runs mid-attempt, whatever this machine's speed
    H.wait_for("20 attempts begun", function()
      return tonumber(H.sql(db, "SELECT count(*) FROM history_named WHERE event = 'step'"
        .. " AND to_status = 'running'")[1]) >= 20
    end, 120)
    -- A stop that lands inside a transaction holds SQLite's one write lock: the second worker
    -- could take nothing until the first went on. Such a stop is undone and made again, until
    -- another process can take the lock.
    local stopped = false
    for _ = 1, 100 do
      sh("kill -STOP " .. a)
      stopped = sh("sqlite3 -batch -cmd '.timeout 100' " .. H.quote(db)
        .. " 'BEGIN IMMEDIATE; ROLLBACK;' >/dev/null 2>&1")
      if stopped then break end
      sh("kill -CONT " .. a)
      sleep(0.01)
    end
    assert.is_truthy(stopped, "the first worker held the write lock at each of 100 stops")
    sleep(0.8)   -- its 0.5 s leases run out
    -- The second worker is an engine here: it takes 20 of the first's runs and does nothing
    -- more until the test drives it (a worker process, whose runs take milliseconds, took all
    -- 400 on a loaded machine before the test could see it had taken 20).
    local b = H.new_engine({ db = db, clock = "real" })
    b:load("spec/support/crash/saga.lua")
    assert.are.equal(20, b:recover(20))
    -- runs taken a second time (recovered, after their claim): by the second worker
    local taken = tonumber(H.sql(db, "SELECT count(DISTINCT run_id) FROM history_named WHERE"
      .. " event = 'recovered'")[1])
    sh("kill -CONT " .. a)
    -- the first hears that it lost them (its log says so, run by run)
    local function lets_go()
      local f = assert(io.open(log))
      local _, n = f:read("a"):gsub("stalled past its lease", "")
      f:close()
      return n
    end
    H.wait_for("the first worker to let a run go", function() return lets_go() >= 1 end, 120)
    local at_wake = lets_go()
    b:run()   -- the second carries its runs on to their end
    local after_b = lets_go()
    sleep(0.2)
    stop(a)
    assert.is_truthy(taken >= 20, "the second worker took " .. taken .. " runs")
    local let_go = lets_go()
    -- which runs, and by which message, if more went than were taken: said, not guessed at
    local runs, kinds = {}, {}
    for line in io.lines(log) do
      if line:find("stalled past its lease", 1, true) then
        local id = line:match('"run":"([^"]+)"') or "?"
        runs[id] = (runs[id] or 0) + 1
        local kind = line:match('"message":"([^":]+)') or line
        kinds[kind] = (kinds[kind] or 0) + 1
      end
    end
    local distinct = 0
    for _ in pairs(runs) do distinct = distinct + 1 end
    assert.is_truthy(let_go >= 1 and let_go < 400, string.format("%d runs were let go (%d taken;"
      .. " %d distinct; %d once it woke, %d after the second ran); %s", let_go, taken, distinct,
      at_wake, after_b, mend.json.encode(kinds)))
    assert.are.equal(0, settle(db, client, ids, log))
    audit(db, client, ids, dir)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

describe("a worker with a backlog, killed while its writer thread commits", function()
  after_each(H.cleanup)

  -- Hundreds of runs ready at once: batches go to the writer thread while the loop works
  -- through the next ones, so kills land with two batches in the air (and at the commit
  -- failpoints, which fire on the writer thread).
  it("loses nothing and applies every effect exactly once", function()
    local db, dir, log, client, ids = new_setup(1500, true)
    math.randomseed(23)
    local points = { "before_commit", "after_commit" }
    for cycle = 1, 16 do
      local env
      if cycle % 2 == 0 then
        env = string.format("MEND_FAILPOINT=%s:%d", points[(cycle // 2) % 2 + 1], math.random(2, 6))
      end
      local pid = start_worker(db, env, log)
      sleep(0.05 + math.random() * 0.15)
      kill9(pid)
      for n = 1, 100 do ids[#ids + 1] = submit(client, dir, 10000 * cycle + n, true) end
    end
    assert.are.equal(0, settle(db, client, ids, log))
    local counts = audit(db, client, ids, dir)
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

describe("runs waiting for events while workers are killed", function()
  after_each(H.cleanup)

  -- 20 runs (more in a soak) wait five times each for "tick"; the harness sends the ticks, a
  -- few a cycle, some twice with the same key (a client retrying), while workers that park
  -- waiting runs after 20 ms are killed at random moments and at the commit failpoints. No
  -- tick may be lost, taken twice, or taken out of the order sent.
  it("loses no event and consumes none twice", function()
    local db, dir, log, client = new_setup(0)
    client:load("spec/support/crash/events.lua")
    local ROUNDS = math.max(24, CYCLES // 8)   -- `make crash-soak` (CYCLES=3000): 375
    local RUNS, WAITS = math.max(20, ROUNDS), 5
    local ids, sent = {}, {}
    for k = 1, RUNS do
      ids[k] = client:start("crash_events", {}, { detached = true })
      sent[k] = 0
    end
    math.randomseed(31)
    local function send(k)
      local i = sent[k] + 1
      if i > WAITS then return end
      local how = client:signal(ids[k], "tick", { n = i }, { key = "tick-" .. i })
      assert.are.equal("sent", how)
      sent[k] = i
      if math.random() < 0.3 then   -- sent again by a client that did not hear the answer
        assert.are.equal("duplicate", (client:signal(ids[k], "tick", { n = i }, { key = "tick-" .. i })))
      end
    end
    -- One round whose instants are the test's own, not the kills': a worker parks run 1 at its
    -- first wait and hears its tick while it lives, so that a parked run brought back by its
    -- event is in the log of every run of this test, however a loaded machine moves the kills.
    local function logged(id, what)
      for line in H.read(log):gmatch("[^\n]+") do
        if line:find(id, 1, true) and line:find(what, 1, true) then return true end
      end
      return false
    end
    local function until_logged(id, what)
      for _ = 1, 3000 do
        if logged(id, what) then return end
        sleep(0.01)
      end
      error("the worker never logged '" .. what .. "' for " .. id)
    end
    local pid = start_worker(db, nil, log, "--park-after 0.02 --log-level debug")
    until_logged(ids[1], "parked: w1 waits for event tick")
    send(1)
    until_logged(ids[1], "back from the store: its event came")
    kill9(pid)
    local points = { "before_commit", "after_commit" }
    for cycle = 1, ROUNDS do
      local env = cycle % 3 == 0
        and string.format("MEND_FAILPOINT=%s:%d", points[(cycle // 3) % 2 + 1], math.random(1, 4))
      local pid = start_worker(db, env, log, "--park-after 0.02 --log-level debug")
      for _ = 1, 2 do send(math.random(1, RUNS)) end
      sleep(0.05 + math.random() * 0.1)   -- it took the runs over and parked some
      for _ = 1, 2 do send(math.random(1, RUNS)) end
      sleep(math.random() * 0.08)
      if cycle % 4 == 0 then send(math.random(1, RUNS)) end   -- and while no worker runs
      kill9(pid)
    end
    for k = 1, RUNS do while sent[k] < WAITS do send(k) end end
    local ran = {}
    for k = 1, RUNS do ran[k] = ids[k] end
    assert.are.equal(0, settle(db, client, ran, log))
    for k, id in ipairs(ids) do
      local st = client:status(id)
      assert.are.equal("succeeded", st.status, id)
      assert.are.same({ 1, 2, 3, 4, 5 }, H.step(st, "taken").result, id)
      local taken = {}
      for _, h in ipairs(client:history(id)) do
        if h.event == "event" then
          assert.is_nil(taken[h.step], "wait " .. tostring(h.step) .. " of " .. id .. " took two events")
          taken[h.step] = true
        end
      end
      for i = 1, WAITS do assert.is_truthy(taken["w" .. i], "no event row for w" .. i .. " of " .. id) end
      assert.are.same({ tostring(WAITS) .. "|" .. tostring(WAITS) .. "|" .. tostring(WAITS) },
        H.sql(db, ("SELECT count(*) || '|' || count(step) || '|' || count(DISTINCT step) FROM inbox"
          .. " WHERE run_id = '%s'"):format(id)), "run " .. k)
    end
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
    -- the kills found runs parked out of memory, and events brought parked runs back
    local text = H.read(log)
    local _, parked = text:gsub('"message":"parked: w%d waits for event tick', "")
    local _, woken = text:gsub('"message":"back from the store: its event came', "")
    print(string.format("\n  %d events to %d runs: %d parked, %d brought back by their event",
      RUNS * WAITS, RUNS, parked, woken))
    assert.is_truthy(parked > 0 and woken > 0, parked .. " parked, " .. woken .. " woken")
  end)
end)

describe("runs waiting for tokens and child runs while workers are killed", function()
  after_each(H.cleanup)

  -- Runs of crash_handoff (spec/support/crash/handoff.lua) hand out a token, then start a
  -- child run; every third is declined after its child succeeded and compensates it. The
  -- harness answers the tokens (some twice, some with a token of an earlier attempt) while
  -- workers that park waiting runs after 20 ms are killed at random moments and at the
  -- failpoints, and while none runs.
  it("takes one answer an attempt, starts each child once and compensates it with its parent",
     function()
    local db, dir, log, client = new_setup(0)
    client:load("spec/support/crash/handoff.lua")
    local w = C.handoff(client, dir, db)
    local ROUNDS = math.max(24, CYCLES // 8)
    math.randomseed(37)
    for cycle = 1, ROUNDS do
      for _ = 1, 2 do w:start(#w.ids + 1) end
      local env = cycle % 3 == 0 and string.format("MEND_FAILPOINT=%s:%d",
        FAILPOINTS[(cycle // 3) % #FAILPOINTS + 1], math.random(1, 4))
      local pid = start_worker(db, env or nil, log, "--park-after 0.02")
      for _ = 1, 4 do
        sleep(0.01 + math.random() * 0.03)
        w:pump()
      end
      kill9(pid)
      w:pump()   -- answered while no worker runs
    end
    assert.are.equal(0, settle(db, client, w.ids, log, nil, function() w:pump() end))
    local counts = w:audit()
    print(string.format("\n  %d runs: %s; %d answers refused, %d unsure", #w.ids,
      mend.json.encode(counts), w.refused, w.unsure))
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
    assert.is_truthy(counts.children > 0 and w.refused > 0)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)
