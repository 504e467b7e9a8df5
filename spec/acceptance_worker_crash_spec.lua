-- Acceptance, from outside: `mend worker` processes killed with SIGKILL at random points while
-- runs move (steps, retries, a wait for an event, compensations), then one last worker: every
-- run ends once, in an end state, and no step whose success is recorded executes again
-- (SPEC section 9), read from the history with plain SQL. SQLite, real clock.
local H = require "spec.helper"
local json = require("mend").json

local FLOW = [[
local mend = require "mend"
local function mark(ctx, what)
  local f = assert(io.open(ctx.input.effects, "a"))
  f:write(what, " ", ctx.idempotency_key, " ", ctx.attempt, "\n")
  f:close()
end
local function step(name)
  return { name = name,
    execute = function(ctx)
      mend.sleep(0.01)
      if name == "b" and ctx.attempt == 1 and ctx.input.n % 3 == 0 then
        error(mend.retryable("flaky")) end
      if name == "d" and ctx.input.n % 4 == 0 then error(mend.fatal("declined")) end
      mark(ctx, "do")
      mend.sleep(0.01)
      return name
    end,
    compensate = function(ctx) mend.sleep(0.01); mark(ctx, "undo") end }
end
return { name = "acc_crash", retry = { initial = 0.02, jitter = 0 },
  compensate_retry = { initial = 0.02 },
  steps = { step("a"), step("b"), { name = "w", wait_for = "go", timeout = 60 }, step("c"),
    step("d") } }
]]

-- The steps of each run in the history: for each, the transitions in order.
local function audit(db)
  local rows = H.sql(db, [[SELECT run_id, step, from_status, to_status FROM history_named
    WHERE event = 'step' ORDER BY run_id, seq]])
  local bad = {}
  local seen = {}
  for _, r in ipairs(rows) do
    local run, step, from, to = r:match("^([^|]*)|([^|]*)|([^|]*)|([^|]*)$")
    local k = run .. "/" .. step
    if seen[k] == "succeeded" and to == "running" then bad[#bad + 1] = k ..
      " ran after it succeeded" end
    if to == "succeeded" then seen[k] = "succeeded" end
    if from == "compensated" then bad[#bad + 1] = k .. " moved after compensated" end
  end
  return bad
end

describe("acceptance: workers killed mid-run #sqlite", function()
  after_each(H.cleanup)

  it("ends every run once and never runs a recorded success again", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "acc_crash.lua", FLOW)
    local db, eff, log = dir .. "/mend.db", dir .. "/effects", dir .. "/log"
    local ids = {}
    for n = 1, 24 do
      local rc, out = H.mend_in(dir, db, ("start acc_crash --workflows %s --input %s")
        :format(H.quote(dir), H.quote(json.encode { n = n, effects = eff })))
      assert.are.equal(0, rc)
      ids[#ids + 1] = out:match("(%S+)")
      -- half the events before the run waits, half while workers come and go
      if n % 2 == 0 then assert.are.equal(0, (H.mend_cmd(db, "signal " .. ids[#ids] .. " go"))) end
    end
    math.randomseed(23)
    for cycle = 1, 6 do
      local pid = H.start_worker(db, dir, log .. cycle, "--lease 0.3 --poll 0.02")
      os.execute(("sleep %.3f"):format(0.1 + math.random() * 0.3))
      if cycle == 3 then
        for i = 1, #ids, 2 do H.mend_cmd(db, "signal " .. ids[i] .. " go") end
      end
      os.execute("kill -KILL " .. pid)
      H.wait_for("worker gone", function()
        return not os.execute("kill -0 " .. pid .. " 2>/dev/null")
      end, 5)
    end
    local pid = H.start_worker(db, dir, log .. "last", "--lease 0.3 --poll 0.02")
    H.wait_for("every run to end", function()
      return tonumber(H.sql(db,
        "SELECT count(*) FROM runs WHERE status IN ('running', 'compensating')")[1]) == 0
    end, 60)
    H.stop_worker(pid)
    local statuses = {}
    for _, r in ipairs(H.sql(db, "SELECT status, count(*) FROM runs GROUP BY status")) do
      local s, c = r:match("^(%w+)|(%d+)$")
      statuses[s] = tonumber(c)
    end
    -- n % 4 == 0 declines at d: compensated; the rest succeed
    assert.are.same({ succeeded = 18, compensated = 6 }, statuses)
    assert.are.same({}, audit(db))
    -- every undo is of a step done (a kill may repeat either: at least once, same key)
    local done = {}
    for l in H.read(eff):gmatch("[^\n]+") do
      local what, key = l:match("^(%S+) (%S+)")
      if what == "do" then done[key] = true else
        assert.is_true(done[key], key .. " undone, never done")
      end
    end
    -- one run row per start, each with its own key
    assert.are.equal(24, tonumber(H.sql(db, "SELECT count(*) FROM runs")[1]))
  end)
end)
