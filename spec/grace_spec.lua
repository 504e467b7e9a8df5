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

-- Running: a worker that exited is a zombie until its parent (init, here) reaps it, which
-- may take a second or two.
local function alive(pid)
  local f = io.open(("/proc/%d/stat"):format(pid), "rb")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return stat:match("^%d+ %b() (%a)") ~= "Z"
end

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
      H.wait_for("the worker to exit", function() return not alive(worker) end, 15)
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
