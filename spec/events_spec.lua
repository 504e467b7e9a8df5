-- Steps that wait for a named event (wait_for, issue 18): the run's inbox, consumption once
-- and in order, idempotent sends, timeouts handled by the step's policy, and waits that last
-- across restarts; first through the Lua API on the virtual clock, then with real `mend
-- worker` processes and the `mend signal` command.
local H = require "spec.helper"
local json = require("mend").json

local MEND = H.MEND
local q = H.quote

local function quest(extra)
  local taken_back = {}
  local kill = { name = "kill", wait_for = "boss_killed", timeout = 7 * 86400 }
  for k, v in pairs(extra or {}) do kill[k] = v end
  local def = { name = "quest", steps = {
    { name = "accept", execute = function(_, input) return { item = input.quest .. "-map" } end,
      compensate = function(_, accepted) taken_back[#taken_back + 1] = accepted.item end },
    kill,
    { name = "reward", execute = function(ctx) return { gold = (ctx.results.kill or {}).gold } end },
  } }
  return def, taken_back
end

local function step(eng, id, name) return H.step(eng:status(id), name) end

local function inbox(db, id)
  return H.sql(db, ("SELECT name || ' ' || coalesce(key, '-') || ' ' || coalesce(step, '-')"
    .. " FROM inbox WHERE run_id = '%s' ORDER BY seq"):format(id))
end

describe("a step with wait_for", function()
  after_each(H.cleanup)

  it("waits for its event, whose payload becomes its result, sent after the wait began", function()
    local eng, db = H.new_engine()
    local def = quest()
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(60)
    local kill = step(eng, id, "kill")
    assert.are.equal("waiting", kill.status)
    assert.are.equal("boss_killed", kill.awaits)
    assert.is_true(math.abs(kill.due - (t0 + 7 * 86400)) < 1, tostring(kill.due - t0))
    assert.are.equal(1, eng:in_flight())
    assert.are.same({ "sent", id }, { eng:signal(id, "boss_killed", { gold = 50 }, { key = "k1" }) })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ gold = 50 }, H.step(st, "kill").result)
    assert.are.same({ gold = 50 }, H.step(st, "reward").result)
    assert.are.same({ "pending->waiting", "waiting->succeeded" }, H.transitions(eng, id, "kill"))
    local ev = H.events(eng, id, { event = "event", step = "kill" })
    assert.are.equal(1, #ev)
    assert.matches('^{"name":"boss_killed","key":"k1","seq":%d+}$', ev[1].detail)
    assert.are.same({ "boss_killed k1 kill" }, inbox(db, id))
  end)

  it("takes an event sent before the run reached the wait from its inbox", function()
    local eng = H.new_engine()
    eng:register(quest())
    local id = eng:start("quest", { quest = "rats" })
    eng:signal(id, "boss_killed", { gold = 7 })   -- nothing has run yet: the step is pending
    assert.are.equal("pending", step(eng, id, "kill").status)
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ gold = 7 }, step(eng, id, "reward").result)
    local ev = H.events(eng, id, { event = "event", step = "kill" })
    assert.matches('^{"name":"boss_killed","key":null,"seq":%d+}$', ev[1].detail)
    -- a key that JSON must escape, and one more run to show the kept buffer holds no old bytes
    local id2 = eng:start("quest", { quest = "rats" })
    eng:signal(id2, "boss_killed", { gold = 1 }, { key = 'q"\\\n\u{e9}' })
    eng:run()
    local detail = H.events(eng, id2, { event = "event", step = "kill" })[1].detail
    assert.are.same({ name = "boss_killed", key = 'q"\\\n\u{e9}' },
      (function(t) t.seq = nil; return t end)(require("mend").json.decode(detail)))
    assert.matches('^{"name":"boss_killed","key":"q\\"\\\\\\n\u{e9}","seq":%d+}$', detail)
  end)

  it("keeps one event for a key sent twice, and two events of one name for two waits, in order",
     function()
    local eng, db = H.new_engine()
    eng:register{ name = "two", steps = {
      { name = "first", wait_for = "tick" },
      { name = "second", wait_for = "tick" },
    } }
    local id = eng:start("two", {})
    assert.are.equal("sent", (eng:signal(id, "tick", "a", { key = "k1" })))
    assert.are.equal("duplicate", (eng:signal(id, "tick", "a again", { key = "k1" })))
    eng:advance(1)
    assert.are.equal("a", step(eng, id, "first").result)
    assert.are.equal("waiting", step(eng, id, "second").status)   -- the duplicate was not an event
    assert.are.equal("duplicate", (eng:signal(id, "tick", "a late copy", { key = "k1" })))
    eng:advance(1)
    assert.are.equal("waiting", step(eng, id, "second").status)
    eng:signal(id, "tick", "b", { key = "k2" })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("b", step(eng, id, "second").result)
    assert.are.same({ "tick k1 first", "tick k2 second" }, inbox(db, id))

    -- sent before either wait: taken in the order sent
    local id2 = eng:start("two", {})
    eng:signal(id2, "tick", { n = 1 })
    eng:signal(id2, "tick", { n = 2 })
    eng:run()
    assert.are.same({ n = 1 }, step(eng, id2, "first").result)
    assert.are.same({ n = 2 }, step(eng, id2, "second").result)
  end)

  it("fails with a timeout when no event comes in time, and the run compensates", function()
    local eng = H.new_engine()
    local def, taken_back = quest()
    eng:register(def)
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(7 * 86400 - 1)
    assert.are.equal("waiting", step(eng, id, "kill").status)
    eng:advance(2)   -- a week on the virtual clock, at once
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.are.equal("failed", H.step(st, "kill").status)
    assert.matches("^timeout: no event boss_killed", H.step(st, "kill").error)
    assert.are.same({ "rats-map" }, taken_back)
    assert.is_nil(H.dlq_entry(eng, id))
    local ok, err = pcall(eng.signal, eng, id, "boss_killed")
    assert.is_false(ok)
    assert.matches("has ended %(compensated%): events go only to running runs", err)
  end)

  it("waits again after a timeout when its retry policy says so", function()
    local eng = H.new_engine()
    eng:register((quest{ timeout = 100, retry = { max_attempts = 2, initial = 5, jitter = 0 } }))
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(101)
    local kill = step(eng, id, "kill")
    assert.are.equal("retry_wait", kill.status)
    eng:advance(6)
    assert.are.equal("waiting", step(eng, id, "kill").status)
    assert.are.equal(2, step(eng, id, "kill").attempts)
    eng:signal(id, "boss_killed", { gold = 1 })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "pending->waiting", "waiting->retry_wait", "retry_wait->pending",
                      "pending->waiting", "waiting->succeeded" }, H.transitions(eng, id, "kill"))
  end)

  it("waits across a restart: its due time from the store, an event sent while nobody ran it",
     function()
    local eng, db = H.new_engine()
    local def = quest()
    eng:register(def)
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(10)
    local due = step(eng, id, "kill").due
    H.close(eng)
    -- another process sends it: the run is held by no engine now
    local sender = H.reopen(db)
    assert.are.equal("sent", (sender:signal(id, "boss_killed", { gold = 3 })))
    H.close(sender)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.same({ gold = 3 }, step(eng2, id, "reward").result)

    -- and with no event, the timeout comes at the stored due time
    local id2 = eng2:start("quest", { quest = "bats" })
    eng2:advance(10)
    due = step(eng2, id2, "kill").due
    H.close(eng2)
    local eng3 = H.reopen(db)
    eng3:register(def)
    eng3:recover()
    eng3:advance(due - eng3:now() - 1)
    assert.are.equal("waiting", step(eng3, id2, "kill").status)
    eng3:advance(2)
    assert.are.equal("compensated", eng3:status(id2).status)
  end)

  it("is cancelled while it waits like any other step", function()
    local eng = H.new_engine()
    local def, taken_back = quest()
    eng:register(def)
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(1)
    eng:cancel(id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "rats-map" }, taken_back)
  end)

  it("is addressed by run key, and refuses unknown runs and bad names", function()
    local eng = H.new_engine()
    eng:register(quest())
    local id = eng:start("quest", { quest = "rats" }, { key = "quest-17" })
    local how, run = eng:signal(nil, "boss_killed", { gold = 9 }, { run_key = "quest-17" })
    assert.are.same({ "sent", id }, { how, run })
    eng:run()
    assert.are.same({ gold = 9 }, step(eng, id, "reward").result)
    local ok, err = pcall(eng.signal, eng, "nosuchrun", "boss_killed")
    assert.is_false(ok)
    assert.matches("no run nosuchrun", err)
    ok, err = pcall(eng.signal, eng, nil, "boss_killed", nil, { run_key = "nope" })
    assert.is_false(ok)
    assert.matches("no run with key nope", err)
    ok, err = pcall(eng.signal, eng, id, "")
    assert.is_false(ok)
    assert.matches("an event needs a name", err)
  end)

  it("refuses a payload over 1 MiB of JSON (MEND_EVENT_DATA_MAX), naming the limit", function()
    local eng, db = H.new_engine()
    eng:register(quest())
    local id = eng:start("quest", { quest = "rats" })
    -- the text of { s = "..." } is 8 bytes more than the string
    local ok, err = pcall(eng.signal, eng, id, "boss_killed", { s = ("x"):rep(1024 * 1024 - 7) })
    assert.is_false(ok)
    assert.matches("the event's payload is 1048577 bytes of JSON, over the limit of 1048576 "
                   .. "(MEND_EVENT_DATA_MAX, 1 MiB)", err, 1, true)
    assert.are.same({}, inbox(db, id))
    assert.are.equal("sent", (eng:signal(id, "boss_killed", { s = ("x"):rep(1024 * 1024 - 8) })))
    eng:run()
    assert.are.equal(1024 * 1024 - 8, #step(eng, id, "kill").result.s)
  end)

  -- A run whose group has a branch failed for good stays `running` while its other branches
  -- stop, then compensates: it waits for no event any more, as a compensating run does not, and
  -- every sender is told so (the engine that holds it, another process, the HTTP API) rather
  -- than told it was sent and leaving it in the inbox for ever.
  it("is refused for a run whose group fails, by every sender, as for one compensating", function()
    local mend = require "mend"
    local def = { name = "gf", steps = {
      { name = "g", parallel = {
        { name = "a", execute = function(ctx) ctx:sleep(1); error(mend.fatal("sold out")) end },
        { name = "b", execute = function(ctx) ctx:sleep(5); return "b" end },
        { name = "c", wait_for = "go" },
      } },
      { name = "after", wait_for = "go" },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("gf", {})
    assert.are.equal("sent", (eng:signal(id, "go", nil, { key = "k1" })))
    eng:advance(2)                               -- a failed for good; b's attempt in flight
    assert.are.equal("running", eng:status(id).status)
    local ok, err = pcall(eng.signal, eng, id, "go")
    assert.is_false(ok)
    assert.matches("run " .. id .. " is failing %(a step failed for good: it compensates next%)",
                   err)
    -- a key sent before is that event again, as for a run that ended
    assert.are.equal("duplicate", (eng:signal(id, "go", nil, { key = "k1" })))
    local rc, out = H.shell(MEND .. " signal " .. id .. " go --db " .. q(db) .. " 2>&1")
    assert.are.equal(1, rc, out)
    assert.matches("is failing", out)
    local S = require "spec.support.serve_harness"
    local base = S.start(H.tmp_dir(), db)
    local code, body = S.post(base, "/api/v1/runs/" .. id .. "/events", { name = "go" })
    S.stop_all()
    assert.are.equal(409, code, json.encode(body))
    assert.matches("is failing", body.error.message)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "go k1 g/c" }, inbox(db, id))
  end)

  -- A cancel asked of the engine that holds the run is done at that engine's next look: until
  -- then the run still says running, but it compensates next and waits for no event.
  it("is refused for a run whose cancel was asked for and is not done yet, by every sender",
     function()
    local eng, db = H.new_engine({ lease = 60 })
    eng:register{ name = "cw", steps = { { name = "w", wait_for = "go" } } }
    local id = eng:start("cw", {})
    eng:advance(1)
    local other = H.reopen(db)
    assert.are.equal("requested", other:cancel(id, { who = "ops" }))
    for _, e in ipairs({ eng, other }) do   -- the engine holding it, one that does not
      local ok, err = pcall(e.signal, e, id, "go")
      assert.is_false(ok)
      assert.matches("run " .. id .. " is being cancelled %(its cancel was asked for", err)
    end
    local rc, out = H.shell(MEND .. " signal " .. id .. " go --db " .. q(db) .. " 2>&1")
    assert.are.equal(1, rc, out)
    assert.matches("is being cancelled", out)
    local S = require "spec.support.serve_harness"
    local base = S.start(H.tmp_dir(), db)
    local code, body = S.post(base, "/api/v1/runs/" .. id .. "/events", { name = "go" })
    S.stop_all()
    assert.are.equal(409, code, json.encode(body))
    assert.matches("is being cancelled", body.error.message)
    assert.is_true(other:status(id).cancel_requested)
    assert.are.same({}, inbox(db, id))
  end)

  it("refuses a definition that waits and executes, with a clear load error", function()
    local eng = H.new_engine()
    local ok, err = pcall(eng.register, eng, { name = "bad", steps = {
      { name = "kill", wait_for = "boss_killed", execute = function() end } } })
    assert.is_false(ok)
    assert.matches('step "kill": wait_for and execute cannot go together', err)
    ok, err = pcall(eng.register, eng, { name = "bad2", steps = {
      { name = "kill", wait_for = 42 } } })
    assert.is_false(ok)
    assert.matches("wait_for must be a string", err)
  end)
end)

-- With real processes: mend start, mend worker, mend signal, mend status.
local mend_cmd = H.mend_cmd

local worker = H.spawn_worker

local stop = H.stop_worker   -- SIGTERM, and the exit

local status_json = H.status_json

local function kill_status(db, id)
  for _, s in ipairs(status_json(db, id).steps) do if s.name == "kill" then return s.status end end
end

describe("mend signal with a real worker", function()
  after_each(H.cleanup)

  local function setup()
    local dir = H.tmp_dir()
    H.write_file(dir, "quest.lua", H.slurp("workflows/quest.lua"))
    return dir, H.new_db(dir, "q.db"), dir .. "/worker.log"
  end

  it("wakes the run a worker holds, by run key; mend status shows the wait and its due time",
     function()
    local dir, db, log = setup()
    local rc, out = mend_cmd(db, "start quest --workflows " .. q(dir)
      .. [[ --input '{"player":17,"quest":"rats"}' --key quest-17]])
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return kill_status(db, id) == "waiting" end, 10)
    rc, out = mend_cmd(db, "status " .. id)
    assert.matches("due: kill waiting for event boss_killed, due %d+%-%d+%-%d+ [%d:.]+ UTC %(in 604[78]%d%d s%)", out)
    rc, out = mend_cmd(db, [[signal --run-key quest-17 boss_killed --data '{"gold":50}' --key k1]])
    assert.are.equal(0, rc, out)
    assert.matches("event boss_killed sent to run " .. id, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    stop(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.same({ gold = 50 }, st.steps[3].result)
    rc, out = mend_cmd(db, "history " .. id)
    assert.matches("event boss_killed consumed %(key k1%)", out)
    -- a duplicate after the run ended (a client repeating a send whose answer it lost) is
    -- told it was sent; a new event to the ended run, an unknown run are refused
    rc, out = mend_cmd(db, "signal " .. id .. " boss_killed --key k1")
    assert.are.equal(0, rc, out)
    assert.matches("run " .. id .. " has event boss_killed with key k1 already: nothing sent", out, 1, true)
    rc, out = mend_cmd(db, "signal " .. id .. " boss_killed --key k2")
    assert.are.equal(1, rc)
    assert.matches("has ended %(succeeded%): events go only to running runs", out)
    rc, out = mend_cmd(db, "signal nosuchrun boss_killed")
    assert.are.equal(1, rc)
    assert.matches("no run nosuchrun", out)
    rc, out = mend_cmd(db, "signal " .. id .. " boss_killed --data '{bad'")
    assert.are.equal(1, rc)
    assert.matches("%-%-data is not JSON", out)
    local big = H.write_file(dir, "big.json", '"' .. ("x"):rep(1024 * 1024) .. '"')
    rc, out = mend_cmd(db, "signal " .. id .. " boss_killed --data @" .. q(big))
    assert.are.equal(1, rc)
    assert.matches("payload is 1048578 bytes of JSON, over the limit of 1048576", out, 1, true)
  end)


  -- A deadline is the step's, not a worker's: that no worker ran when it passed (all killed,
  -- or stopped) does not stretch it for an event sent after it. An event sent in time while
  -- no worker ran is taken (the test above); one sent late stays in the inbox.
  -- (A timeout of 3 s: a sanitizer build's worker and mend status must see the wait first.)
  it("times a wait out whose timeout passed while no worker ran, though an event came after it",
     function()
    local dir = H.tmp_dir()
    H.write_file(dir, "quick.lua", [[
      local undo = "]] .. dir .. [[/undone"
      return { name = "quick", steps = {
        { name = "hold", execute = function() return 1 end,
          compensate = function() local f = io.open(undo, "a"); f:write("hold\n"); f:close() end },
        { name = "kill", wait_for = "boss_killed", timeout = 3 },
      } }]])
    local db, log = H.new_db(dir, "q.db"), dir .. "/worker.log"
    local rc, out = mend_cmd(db, "start quick --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return kill_status(db, id) == "waiting" end, 10)
    H.shell("kill -9 " .. pid)
    local due = H.step(status_json(db, id), "kill").due
    while os.time() < due + 1 do H.shell("sleep 0.2") end
    rc, out = mend_cmd(db, "signal " .. id .. [[ boss_killed --data '{"gold":1}' --key late]])
    assert.are.equal(0, rc, out)   -- the inbox keeps it: a later wait of that name may take it
    pid = worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    stop(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.are.equal("hold\n", H.read(dir .. "/undone"))
    assert.are.same({ "boss_killed late -" }, inbox(db, id))
  end)
  it("keeps an event sent while no worker runs for the next one, after a restart", function()
    local dir, db, log = setup()
    local rc, out = mend_cmd(db, "start quest --workflows " .. q(dir)
      .. [[ --input '{"player":18,"quest":"bats"}']])
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return kill_status(db, id) == "waiting" end, 10)
    stop(pid)
    -- a payload over what one argument of a command line holds, from a file (--data @FILE)
    local pad = string.rep("p", 200 * 1024)
    H.write_file(dir, "payload.json", '{"gold":5,"pad":"' .. pad .. '"}')
    rc, out = mend_cmd(db, "signal " .. id .. " boss_killed --data @" .. q(dir .. "/payload.json")
      .. " --key once")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "signal " .. id .. [[ boss_killed --data '{"gold":6}' --key once]])
    assert.are.equal(0, rc, out)
    assert.matches("nothing sent", out)
    assert.are.equal("waiting", kill_status(db, id))
    pid = worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    stop(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local steps = status_json(db, id).steps
    assert.are.same({ gold = 5 }, steps[3].result)
    assert.are.equal(#pad, #steps[2].result.pad)   -- the event's payload, whole
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox"))
  end)
end)
