-- Runs that wait cost no memory (issue 18, item 4): a run waiting for an event, a durable sleep
-- or a retry's backoff leaves the engine's memory once it has waited park_after seconds
-- (eng:parked() counts it, eng:in_flight() no longer does; `mend worker --log-level debug`
-- names each), and comes back from the store on its event, its due time (on the virtual clock
-- too), a cancel, or to be given back; first through the Lua API on the virtual clock, then with
-- real `mend worker` processes.
local H = require "spec.helper"
local json = require("mend").json

local MEND = H.MEND
local q = H.quote

local function quest(timeout)
  local taken_back = {}
  return { name = "quest", steps = {
    { name = "accept", execute = function(_, input) return { item = input.quest .. "-map" } end,
      compensate = function(_, accepted) taken_back[#taken_back + 1] = accepted.item end },
    { name = "kill", wait_for = "boss_killed", timeout = timeout },
    { name = "reward", execute = function(ctx) return { gold = (ctx.results.kill or {}).gold } end },
  } }, taken_back
end

local function step(eng, id, name) return H.step(eng:status(id), name) end

describe("a waiting run on the virtual clock", function()
  after_each(H.cleanup)

  it("leaves memory after park_after and comes back on its event, with nothing more in its history",
     function()
    local eng = H.new_engine{ park_after = 5 }
    eng:register((quest(7 * 86400)))
    local id = eng:start("quest", { quest = "rats" })
    eng:advance(1)
    assert.are.same({ 1, 0 }, { eng:in_flight(), eng:parked() })
    eng:advance(5)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    assert.are.equal("waiting", step(eng, id, "kill").status)   -- the store's word, unchanged
    local rows = #eng:history(id)
    eng:signal(id, "boss_killed", { gold = 50 })
    assert.are.same({ 1, 0 }, { eng:in_flight(), eng:parked() })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ gold = 50 }, H.step(st, "reward").result)
    assert.are.same({ "pending->waiting", "waiting->succeeded" }, H.transitions(eng, id, "kill"))
    assert.are.same({}, H.events(eng, id, { event = "recovered" }))
    assert.are.same({}, H.events(eng, id, { event = "claimed" }))
    assert.is_true(#eng:history(id) > rows)
  end)

  it("comes back at its due time and times out then, a week later, at once", function()
    local eng = H.new_engine{ park_after = 5 }
    local def, taken_back = quest(7 * 86400)
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("quest", { quest = "bats" })
    eng:advance(7 * 86400 - 10)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    assert.are.equal("waiting", step(eng, id, "kill").status)
    eng:run()   -- nothing in memory: the parked run's due time keeps run() going
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.are.same({ "bats-map" }, taken_back)
    assert.is_true(math.abs(eng:now() - (t0 + 7 * 86400)) < 1, tostring(eng:now() - t0))
    assert.are.same({ 0, 0 }, { eng:in_flight(), eng:parked() })
  end)

  it("parks a run waiting for its completion token and brings it back when the token is used",
     function()
    local eng = H.new_engine{ park_after = 5 }
    local sent = {}
    eng:register{ name = "refund", steps = {
      { name = "approve", wait = "token", timeout = 48 * 3600,
        execute = function(ctx) sent[#sent + 1] = ctx:token() end },
      { name = "pay", execute = function(ctx) return { paid = ctx.results.approve } end },
    } }
    local id = eng:start("refund", {})
    eng:advance(10)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    assert.are.equal(1, #sent)
    assert.are.equal(id, eng:complete(sent[1], "yes"))
    assert.are.equal(0, eng:parked())
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ paid = "yes" }, H.step(st, "pay").result)
    assert.are.equal(1, #sent)   -- brought back, not executed again
  end)

  it("parks a parent waiting for its child run and brings it back when the child ends", function()
    local eng = H.new_engine{ park_after = 5 }
    eng:register{ name = "shipping", steps = {
      { name = "pickup", wait_for = "picked_up" },
      { name = "label", execute = function(ctx) return { parcel = ctx.results.pickup } end },
    } }
    eng:register{ name = "order", steps = {
      { name = "ship", child = "shipping" },
      { name = "done", execute = function(ctx) return ctx.results.ship.label end },
    } }
    local id = eng:start("order", {})
    eng:advance(10)
    assert.are.same({ 0, 2 }, { eng:in_flight(), eng:parked() })   -- parent and child
    local child = eng:status(id).children[1].run_id
    eng:signal(child, "picked_up", "p-1")
    eng:run()
    assert.are.equal("succeeded", eng:status(child).status)
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ parcel = "p-1" }, H.step(st, "done").result)
    assert.are.same({ 0, 0 }, { eng:in_flight(), eng:parked() })
  end)

  it("parks a durable sleep and a retry's backoff, and wakes each at its due time", function()
    local eng = H.new_engine{ park_after = 5 }
    local mend = require "mend"
    local calls = 0
    eng:register{ name = "slow", steps = {
      { name = "nap", sleep = 3600 },
      { name = "flaky", retry = { max_attempts = 2, initial = 50, jitter = 0 },
        execute = function()
          calls = calls + 1
          if calls == 1 then error(mend.retryable("not yet")) end
          return calls
        end },
    } }
    local id = eng:start("slow", {})
    eng:advance(60)
    assert.are.equal("sleeping", step(eng, id, "nap").status)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    eng:advance(3550)   -- the nap ended at 3600 s, the first attempt failed: a retry at 3650 s
    assert.are.equal("retry_wait", step(eng, id, "flaky").status)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    eng:advance(50)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(2, calls)
    assert.are.same({ 0, 0 }, { eng:in_flight(), eng:parked() })
  end)

  it("is brought back to be cancelled, and given back by an engine that closes", function()
    local eng, db = H.new_engine{ park_after = 5 }
    local def, taken_back = quest()
    eng:register(def)
    local a = eng:start("quest", { quest = "a" })
    local b = eng:start("quest", { quest = "b" })
    eng:advance(10)
    assert.are.equal(2, eng:parked())
    eng:cancel(a)
    eng:run()
    assert.are.equal("compensated", eng:status(a).status)
    assert.are.same({ "a-map" }, taken_back)
    assert.are.same({ 0, 1 }, { eng:in_flight(), eng:parked() })
    H.close(eng)
    assert.are.same({ "" }, H.sql(db, ("SELECT coalesce(owner, '') FROM runs WHERE id = '%s'"):format(b)))
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:signal(b, "boss_killed", { gold = 1 })
    eng2:run()
    assert.are.equal("succeeded", eng2:status(b).status)
  end)
end)

-- With real processes: mend start, mend worker, mend signal.
local function mend_cmd(db, args)
  return H.shell(("%s %s --db %s"):format(MEND, args, q(db)))
end

local started = {}   -- workers a failed test left running are killed after it

local function worker(db, dir, log, flags)
  local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 --log-level debug %s 2>>%s' >/dev/null & echo $!")
    :format(MEND, q(db), q(dir), flags or "", q(log)))
  local pid = p:read("l")
  p:close()
  started[#started + 1] = pid
  return pid
end

local function kill_left()
  for _, pid in ipairs(started) do os.execute("kill -CONT " .. pid .. " 2>/dev/null; kill -9 " .. pid .. " 2>/dev/null") end
  started = {}
  H.cleanup()
end

local function parked_lines(log, id)
  local n = 0
  for line in H.read(log):gmatch("[^\n]+") do
    if line:find('"event":"park"', 1, true) and line:find(id, 1, true) then n = n + 1 end
  end
  return n
end

local function status_json(db, id)
  local rc, out = mend_cmd(db, "status " .. id .. " --json")
  assert.are.equal(0, rc, out)
  return json.decode(out)
end

describe("mend worker with runs that wait", function()
  after_each(kill_left)

  local function setup(text)
    local dir = H.tmp_dir()
    H.write_file(dir, "quest.lua", text or H.slurp("workflows/quest.lua"))
    return dir, dir .. "/q.db", dir .. "/worker.log"
  end

  local function start(db, dir, key)
    local rc, out = mend_cmd(db, "start quest --workflows " .. q(dir)
      .. [[ --input '{"player":17,"quest":"rats"}' --key ]] .. key)
    assert.are.equal(0, rc, out)
    return out:match("(%S+)")
  end

  it("drops a waiting run from memory, says so, and brings it back on mend signal", function()
    local dir, db, log = setup()
    local id = start(db, dir, "quest-1")
    local pid = worker(db, dir, log, "--park-after 0.2")
    H.wait_for("the run parked", function()
      return H.read(log):find("parked: kill waits for event boss_killed (1 parked, 0 in memory)", 1, true)
    end, 10)
    local rc, out = mend_cmd(db, "status " .. id)
    assert.matches("held by worker", out)   -- still this worker's, out of its memory
    rc, out = mend_cmd(db, [[signal --run-key quest-1 boss_killed --data '{"gold":50}']])
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    assert.truthy(H.read(log):find("back from the store: its event came (0 parked, 1 in memory)", 1, true))
    assert.are.same({ gold = 50 }, status_json(db, id).steps[3].result)
  end)

  it("brings a parked run back at its due time on the virtual clock: a week, at once", function()
    local dir, db, log = setup()
    local id = start(db, dir, "quest-2")
    local pid = worker(db, dir, log, "--clock virtual")
    local rc, out = mend_cmd(db, "wait " .. id .. " --timeout 20")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("timeout", st.reason)
    local text = H.read(log)
    assert.truthy(text:find("parked: kill waits for event boss_killed", 1, true), text)
    assert.truthy(text:find("back from the store: its due time came", 1, true), text)
    assert.are.equal(2, parked_lines(log, id))
  end)

  it("lets go of the runs it parked that another worker took while it was stopped past its lease",
     function()
    local dir, db = setup()
    local log_a, log_b = dir .. "/a.log", dir .. "/b.log"
    local ids = {}
    for k = 1, 3 do ids[k] = start(db, dir, "quest-s" .. k) end
    local a = worker(db, dir, log_a, "--park-after 0.1 --lease 0.5")
    H.wait_for("every run parked in the first worker", function()
      return H.read(log_a):find("(3 parked, 0 in memory)", 1, true)
    end, 10)
    -- A stop that lands inside a transaction (a renewal) holds SQLite's one write lock: the
    -- second worker can take nothing until the first goes on. Then let it go on a moment and
    -- stop it again.
    local b, ok, err
    for _ = 1, 6 do
      os.execute("kill -STOP " .. a)
      os.execute("sleep 1")   -- its lease runs out
      b = b or worker(db, dir, log_b, "--park-after 0.1 --lease 0.5")
      ok, err = pcall(H.wait_for, "the second worker holding the runs", function()
        return H.read(log_b):find("(3 parked, 0 in memory)", 1, true)
      end, 5)
      if ok then break end
      os.execute("kill -CONT " .. a)
      os.execute("sleep 0.05")
    end
    assert(ok, tostring(err) .. "\nfirst worker:\n" .. H.read(log_a) .. "\nsecond worker:\n" .. H.read(log_b))
    for k = 1, 3 do
      local rc, out = mend_cmd(db, "signal " .. ids[k] .. [[ boss_killed --data '{"gold":]] .. k .. "}'")
      assert.are.equal(0, rc, out)
    end
    for k = 1, 3 do
      local rc, out = mend_cmd(db, "wait " .. ids[k] .. " --timeout 10")
      assert.are.equal(0, rc, out .. H.read(log_b))
    end
    os.execute("kill -CONT " .. a)
    H.wait_for("the first worker letting its parked runs go", function()
      local _, n = H.read(log_a):gsub("another worker took this parked run", "")
      return n == 3
    end, 10)
    H.stop_worker(a)
    H.stop_worker(b)
    for k, id in ipairs(ids) do
      assert.are.same({ gold = k }, status_json(db, id).steps[3].result)
      -- after the second worker took it over, every row is the second worker's
      local rc, out = mend_cmd(db, "history " .. id .. " --json")
      assert.are.equal(0, rc, out)
      local holder
      for _, h in ipairs(json.decode(out)) do
        if h.event == "claimed" or h.event == "recovered" then holder = h.worker
        elseif holder then assert.are.equal(holder, h.worker, id) end
      end
    end
  end)

  it("wakes parked runs held by either of two workers on one database, and gives them back", function()
    local dir, db, log = setup()
    local ids = {}
    for k = 1, 4 do ids[k] = start(db, dir, "quest-w" .. k) end
    local a = worker(db, dir, log, "--park-after 0.2")
    local b = worker(db, dir, log, "--park-after 0.2")
    H.wait_for("every run parked", function()
      local n = 0
      for _, id in ipairs(ids) do n = n + (parked_lines(log, id) > 0 and 1 or 0) end
      return n == 4
    end, 15)
    for k = 1, 2 do
      local rc, out = mend_cmd(db, "signal " .. ids[k] .. [[ boss_killed --data '{"gold":]] .. k .. "}'")
      assert.are.equal(0, rc, out)
    end
    for k = 1, 2 do
      local rc, out = mend_cmd(db, "wait " .. ids[k] .. " --timeout 10")
      assert.are.equal(0, rc, out .. H.read(log))
      assert.are.same({ gold = k }, status_json(db, ids[k]).steps[3].result)
    end
    H.stop_worker(a)
    H.stop_worker(b)
    -- stopped, they gave the runs still parked back: nobody holds them
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM runs WHERE owner IS NULL AND status = 'running'"))
  end)
end)
