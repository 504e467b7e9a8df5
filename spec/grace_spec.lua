-- A stopping `mend worker` (SIGTERM) lets the attempts in flight finish within --grace, counted
-- from the loop turn that takes the signal, and then gives their runs back: an attempt still
-- waiting when the grace runs out is abandoned then (its run left for another worker), not
-- when something happens to wake the worker later.
local H = require "spec.helper"
local json = require("mend").json

local SLOW = [[
local mend = require "mend"
return { name = "slow", steps = {
  { name = "long", execute = function() mend.sleep(6) return "done" end } } }
]]

describe("a worker stopped with SIGTERM", function()
  after_each(H.cleanup)

  it("gives back a run whose attempt outlasts --grace 1 once the grace is over", function()
    local dir, db = H.tmp_dir(), H.tmp_db()
    H.write_file(dir, "slow.lua", SLOW)
    local log = dir .. "/worker.log"
    local p = assert(io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 --grace 1"
      .. " --lease 60 --park-after 0 2>>%s' >/dev/null & echo $!")
      :format(H.MEND, H.quote(db), H.quote(dir), H.quote(log))))
    local worker = assert(tonumber(p:read("l")))
    p:close()
    local ok, err = pcall(function()
      local rc, out = H.mend_cmd(db, "start slow --workflows " .. H.quote(dir))
      assert.are.equal(0, rc, out)
      local id = out:match("(%w+)%s*$")
      H.wait_for("the step to run", function()
        local st = H.status_json(db, id)
        return st.steps[1].status == "running" and st.held_by ~= nil
      end, 30)
      os.execute(("kill -TERM %d"):format(worker))
      H.wait_for("the worker to exit", function() return not H.alive(worker) end, 15)
      -- The attempt (6 s of sleep) did not finish: the run is given back unfinished.
      local st = H.status_json(db, id)
      assert.are.equal("running", st.status)
      assert.are_not.equal("succeeded", st.steps[1].status)
      assert.is_nil(st.held_by)
      -- It stopped 1 s (and a loop turn) after the signal, by its own log's clock, not when
      -- something else woke it (before, its next wake-up: up to a second later here).
      local said, stopped
      for line in H.read(log):gmatch("[^\n]+") do
        local e = json.decode(line)
        if e.message:find("^SIGTERM") then said = e.time end
        if e.message:find("^stopping with 1 attempt%(s%) in flight") then stopped = e.time end
      end
      assert.is_truthy(said and stopped, H.read(log))
      assert.is_true(stopped - said >= 1 and stopped - said < 1.25,
                     ("stopped %.3f s after SIGTERM, with --grace 1"):format(stopped - said))
    end)
    os.execute(("kill -KILL %d 2>/dev/null"):format(worker))
    assert(ok, err)
  end)
end)

-- eng:stop() from a step late in a long loop turn: libuv's timer counts from the turn's start,
-- so the wake-up for the grace's end must be armed again for what is left by the real clock,
-- or serve waits for the sleeping attempt (20 s) instead of its grace (1 s).
describe("eng:stop() from a step late in a long turn", function()
  after_each(H.cleanup)

  it("ends serve when the grace runs out, not when the attempt in flight ends", function()
    local mend = require "mend"
    local eng = H.new_engine{ clock = "real", grace = 1, lease = 60 }
    eng:register{ name = "slow", steps = { { name = "long", execute = function()
      mend.sleep(20) return "done" end } } }
    eng:register{ name = "stopper", steps = { { name = "s", execute = function()
      local t = os.clock()
      while os.clock() - t < 0.4 do end
      eng:stop()
      return 1
    end } } }
    eng:start("slow", {})
    eng:start("stopper", {})
    local t0 = eng:now()
    eng:serve{ poll = 0.05 }
    local took = eng:now() - t0
    assert.is_true(took < 10, ("serve returned %.3f s after it began (grace 1 s)"):format(took))
  end)
end)

-- A workflow file whose top level takes a while (up to the load's 10 s limit): a worker told to
-- stop while it loads stops then, not once the file has loaded. Its top level notes that it
-- began, then spins for 8 s of wall time.
local SLOW_LOAD = [[
local f = assert(io.open(%q, "w"))
f:close()
local t = os.time()
while os.time() < t + 8 do end
return { name = "heavy", steps = { { name = "a", execute = function() return 1 end } } }
]]

local QUICK = [[
return { name = "quick", steps = { { name = "a", execute = function() return 1 end } } }
]]

describe("a worker stopped while a workflow file loads", function()
  after_each(H.cleanup)

  -- A worker in the background: its pid, and where its exit status and log go.
  local function start_worker(dir, db)
    local rc_file, log = dir .. "/rc", dir .. "/worker.log"
    os.execute(("sh -c '%s worker --db %s --workflows %s --poll 0.05 2>>%s & echo $! > %s; wait $!;"
      .. " echo $? > %s' >/dev/null 2>&1 &")
      :format(H.MEND, H.quote(db), H.quote(dir .. "/wf"), H.quote(log), H.quote(dir .. "/pid"),
              H.quote(rc_file)))
    H.wait_for("the worker's pid", function() return H.read(dir .. "/pid"):match("%d+") ~= nil end, 10)
    return tonumber(H.read(dir .. "/pid"):match("%d+")), rc_file, log
  end

  -- SIGTERM once the slow file's top level has begun: the exit status, the seconds the worker
  -- took to exit, and its log.
  local function stop_while_loading(dir, db, pid, rc_file, log)
    H.wait_for("the slow file's load", function()
      local f = io.open(dir .. "/began")
      if f then f:close() end
      return f ~= nil
    end, 15)
    local t0 = H.wall()
    os.execute("kill -TERM " .. pid)
    H.wait_for("the worker's exit", function() return H.read(rc_file):match("%d+") ~= nil end, 15)
    local took = H.wall() - t0
    return tonumber(H.read(rc_file):match("%d+")), took, H.read(log)
  end

  local function assert_stopped_cleanly(rc, took, log)
    assert.are.equal(0, rc, log)
    assert.is_true(took < 3, ("exited %.2f s after SIGTERM, the file still loading: %s"):format(took, log))
    assert.matches("SIGTERM", log)
    assert.matches("heavy%.lua", log)   -- says which load it stopped
    assert.is_nil(log:find("workflow_load_failed", 1, true), log)   -- not a broken file
  end

  it("as it starts: it exits 0 at once, saying so, having served nothing", function()
    local dir = H.tmp_dir()
    os.execute("mkdir -p " .. H.quote(dir .. "/wf"))
    H.write_file(dir .. "/wf", "heavy.lua", SLOW_LOAD:format(dir .. "/began"))
    local db = H.new_db(dir, "w.db")
    local pid, rc_file, log = start_worker(dir, db)
    local ok, rc, took, text = pcall(stop_while_loading, dir, db, pid, rc_file, log)
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    assert(ok, rc)
    assert_stopped_cleanly(rc, took, text)
  end)

  it("as it serves (a file added since it started): it stops as a SIGTERM stops it", function()
    local dir = H.tmp_dir()
    os.execute("mkdir -p " .. H.quote(dir .. "/wf"))
    H.write_file(dir .. "/wf", "quick.lua", QUICK)
    local db = H.new_db(dir, "w.db")
    local pid, rc_file, log = start_worker(dir, db)
    local ok, code, took, text = pcall(function()
      local rc, out = H.mend_cmd(db, "start quick --workflows " .. H.quote(dir .. "/wf"))
      assert.are.equal(0, rc, out)
      local id = out:match("(%w+)%s*$")
      H.wait_for("the quick run", function() return H.status_json(db, id).status == "succeeded" end, 15)
      H.write_file(dir .. "/wf", "heavy.lua", SLOW_LOAD:format(dir .. "/began"))
      return stop_while_loading(dir, db, pid, rc_file, log)
    end)
    os.execute("kill -KILL " .. pid .. " 2>/dev/null")
    assert(ok, code)
    assert_stopped_cleanly(code, took, text)
    assert.matches("finishing attempts in flight", text)   -- its usual stop
  end)
end)
