-- Recovery from the store alone, and durable sleeps, through the Lua API: one engine stops
-- mid-run (closed as at a shutdown, or its attempt cut short), a second engine on the same
-- file resumes the run. The crash tests with real SIGKILLed processes are in crash_spec.lua.
local H = require "spec.helper"
local mend = require "mend"

local function transitions(eng, id, step)
  local out = {}
  for _, h in ipairs(eng:history(id)) do
    if h.event == "step" and h.step == step then out[#out + 1] = h.from .. ">" .. h.to end
  end
  return out
end

-- Starts a run of `def`, lets the virtual clock go `seconds` (an attempt of `step` is then in
-- flight), closes the engine as at a shutdown, and resumes the run with a second engine on the
-- same file until it ends. Returns the second engine and the run's id.
local function resume_after_stop(def, seconds, step)
  local eng, db = H.new_engine()
  eng:register(def)
  local id = eng:start(def.name, {})
  eng:advance(seconds)
  assert.are.equal("running", H.step(eng:status(id), step).status)
  H.close(eng)
  local eng2 = H.reopen(db)
  eng2:register(def)
  eng2:recover()
  eng2:run()
  return eng2, id
end

describe("a sleep step", function()
  after_each(H.cleanup)

  it("waits durably before executing, as long as it says, with no attempt in flight", function()
    local eng = H.new_engine()
    local ran_at
    eng:register{ name = "cool", steps = {
      { name = "first", execute = function() return 1 end },
      { name = "cool_off", sleep = 3600 },
      { name = "then", sleep = 5, execute = function(ctx) ran_at = ctx:now(); return 2 end },
    } }
    local t0 = eng:now()
    local id = eng:start("cool", {})
    eng:advance(1800)
    local st = eng:status(id)
    assert.are.equal("sleeping", H.step(st, "cool_off").status)
    assert.are.equal(0, H.step(st, "cool_off").attempts)
    assert.is_truthy(math.abs(H.step(st, "cool_off").due - (t0 + 3600)) < 1e-3)
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.is_truthy(math.abs(ran_at - (t0 + 3605)) < 1e-3)
    assert.are.same({ "pending>sleeping", "sleeping>pending", "pending>succeeded" },
      transitions(eng, id, "cool_off"))
  end)

  it("survives a restart and ends at its stored due time", function()
    local def = { name = "nap", steps = {
      { name = "nap", sleep = 600 },
      { name = "after", execute = function(ctx) return ctx:now() end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("nap", {})
    eng:advance(100)
    H.close(eng)                               -- the process goes away mid-sleep
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    -- the second engine's virtual clock starts from the wall clock again: the step ran at the
    -- due time the first engine stored, not 600 s after the restart
    assert.is_truthy(H.step(st, "after").result >= t0 + 600)
    assert.is_truthy(H.step(st, "after").result < eng2:now() + 1)
  end)

  it("refuses a negative sleep with a message naming the step", function()
    local eng = H.new_engine()
    assert.has_error(function() eng:register{ name = "x", steps = { { name = "w", sleep = -1 } } } end,
      'register: step "w": sleep must be >= 0 seconds, got -1')
  end)
end)

describe("recovery", function()
  after_each(H.cleanup)

  it("executes again a step found running, with the same idempotency key, counting the attempt", function()
    local keys, calls = {}, 0
    local def = { name = "r", steps = {
      { name = "pay", execute = function(ctx)
          calls = calls + 1
          keys[#keys + 1] = ctx.idempotency_key
          mend.sleep(10)                       -- the engine stops while this attempt waits
          return ctx.attempt
        end },
    } }
    local eng2, id = resume_after_stop(def, 1, "pay")
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(2, calls)
    assert.are.equal(keys[1], keys[2])
    assert.are.equal(2, H.step(st, "pay").attempts)
    assert.are.equal(2, H.step(st, "pay").result)
    assert.are.same({ "pending>running", "running>running", "running>succeeded" },
      transitions(eng2, id, "pay"))
  end)

  it("keeps a step's own idempotency key, asked once, for the attempt after a restart", function()
    -- a key function that would answer differently if asked again: the stored key must come back
    local asked, keys = 0, {}
    local def = { name = "keyed", steps = {
      { name = "charge",
        idempotency_key = function() asked = asked + 1; return "charge-" .. asked end,
        execute = function(ctx)
          keys[#keys + 1] = ctx.idempotency_key
          if #keys == 1 then mend.sleep(10) end   -- the engine stops while this waits
          return true
        end },
    } }
    local eng2, id = resume_after_stop(def, 1, "charge")
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.same({ "charge-1", "charge-1" }, keys)
    assert.are.equal(1, asked)
    assert.are.equal("charge-1", H.step(eng2:status(id), "charge").idempotency_key)
  end)

  it("counts a retry's attempt in flight across a restart, as the store reads it", function()
    -- the step's row says what attempt 1 came to (a retry wait, then pending); attempt 2 is
    -- only in history when the engine stops, and must read and resume as attempt 2
    local seen = {}
    local def = { name = "again", retry = { max_attempts = 5, initial = 1, jitter = 0 }, steps = {
      { name = "call", execute = function(ctx)
          seen[#seen + 1] = ctx.attempt
          if ctx.attempt == 1 then error(mend.retryable("busy")) end
          if ctx.attempt == 2 then mend.sleep(10) end   -- the engine stops while this waits
          return ctx.attempt
        end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("again", {})
    eng:advance(2)
    local call = H.step(eng:status(id), "call")
    assert.are.equal("running", call.status)
    assert.are.equal(2, call.attempts)
    assert.are.same({ "pending" }, H.sql(db, "SELECT status FROM steps WHERE run_id = '" .. id .. "'"))
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    call = H.step(eng2:status(id), "call")
    assert.are.equal("running", call.status)   -- read from the file alone
    assert.are.equal(2, call.attempts)
    eng2:recover()
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ 1, 2, 3 }, seen)
    assert.are.equal(3, H.step(st, "call").attempts)
    assert.are.equal(3, H.step(st, "call").result)
    assert.are.same({ "pending>running", "running>retry_wait", "retry_wait>pending",
                      "pending>running", "running>running", "running>succeeded" },
      transitions(eng2, id, "call"))
  end)

  it("resumes a retry wait at its stored due time, and never re-executes a succeeded step", function()
    local first, second = 0, 0
    local def = { name = "w", retry = { initial = 100, jitter = 0 }, steps = {
      { name = "one", execute = function() first = first + 1; return "done" end },
      { name = "two", execute = function(ctx)
          second = second + 1
          if ctx.attempt == 1 then error(mend.retryable("busy")) end
          return ctx.results.one
        end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("w", {})
    eng:advance(10)
    local due = H.step(eng:status(id), "two").due
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(1, first)
    assert.are.equal(2, second)
    assert.are.equal("done", H.step(st, "two").result)
    local ran
    for _, h in ipairs(eng2:history(id)) do
      if h.step == "two" and h.to == "running" and h.attempt == 2 then ran = h.at end
    end
    assert.is_truthy(ran >= due - 1e-6)
  end)

  it("resumes a compensation where it stopped, in reverse order, each compensation once", function()
    local undone = {}
    local function step(name, fail)
      return { name = name,
        execute = function() if fail then error(mend.fatal("declined")) end return name end,
        compensate = function(ctx, result)
          undone[#undone + 1] = result
          if result == "b" and #undone == 1 then mend.sleep(50) end   -- stopped mid-compensation
        end }
    end
    local def = { name = "c", steps = { step("a"), step("b"), step("c", true) } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("c", {})
    eng:advance(1)
    assert.are.equal("compensating", eng:status(id).status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.equal("compensated", eng2:status(id).status)
    -- "b" was cut short and is compensated again (compensations are idempotent), then "a"
    assert.are.same({ "b", "b", "a" }, undone)
  end)

  it("leaves a run whose workflow is not loaded alone, and says why in the log", function()
    local lines = {}
    local eng, db = H.new_engine()
    eng:register{ name = "gone", steps = { { name = "s", execute = function() mend.sleep(5) end } } }
    local id = eng:start("gone", {})
    eng:advance(1)
    H.close(eng)
    local eng2 = H.reopen(db, { log = function(rec) lines[#lines + 1] = rec.message end })
    assert.are.equal(0, eng2:recover())
    assert.are.equal("running", eng2:status(id).status)
    assert.is_truthy(table.concat(lines, "\n"):find('workflow "gone" is not loaded here', 1, true))
  end)

  it("gives back the leases of a closed engine so another can take its runs at once", function()
    local def = { name = "l", steps = { { name = "s", execute = function() mend.sleep(5); return 1 end } } }
    local eng, db = H.new_engine({ lease = 3600 })
    eng:register(def)
    eng:start("l", {})
    eng:advance(1)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
  end)
end)

describe("an engine that stalled past its lease", function()
  after_each(H.cleanup)

  -- The engine does not turn between calls here, which is a stall: its 0.1 s leases run out
  -- while the test sleeps. A second engine takes the run, then closes (giving it back); the
  -- first claims it again before it has heard that it lost it.
  it("claims a run back from the store, not from its stale copy", function()
    local def = { name = "nap", steps = {
      { name = "wait", execute = function() mend.sleep(10) return "ok" end },
      { name = "after", execute = function() return "done" end } } }
    local a, db = H.new_engine({ lease = 0.1 })
    a:register(def)
    local id = a:start("nap", {})
    a:advance(1)   -- in the attempt, asleep until t = 10
    os.execute("sleep 0.3")
    local b = H.reopen(db)
    b:register(def)
    assert.are.equal(1, b:recover())
    H.close(b)   -- gives the lease back
    assert.are.equal(1, a:recover())
    assert.are.equal(1, a:in_flight())   -- the stored run, not the stale copy beside it
    a:advance(30)
    assert.are.equal("succeeded", a:status(id).status)
    local done = 0
    for _, h in ipairs(a:history(id)) do
      if h.event == "step" and h.to == "succeeded" and h.step == "wait" then done = done + 1 end
    end
    assert.are.equal(1, done)
  end)
end)

describe("a serving worker", function()
  after_each(H.cleanup)

  -- Each poll asks only for runs nobody holds and for workers whose lease ran out: that costs
  -- what there is to take, not what the worker holds. A run whose holder left no row at all
  -- (a database from before schema 7) is found by the look that walks every run, which comes
  -- first.
  it("takes at its first look a run whose holder left no lease behind", function()
    local a, db = H.new_engine()
    a:register{ name = "orphan", steps = { { name = "s", execute = function() mend.sleep(5) return 1 end } } }
    local id = a:start("orphan", {})
    a:advance(1)
    H.close(a)
    H.sql(db, "UPDATE runs SET owner = 'gone:1:0' WHERE id = " .. H.quote(id))
    assert.are.equal("0", H.sql(db, "SELECT count(*) FROM workers")[1])
    local b = H.reopen(db, { clock = "real" })
    local ran = false
    b:register{ name = "orphan", steps = { { name = "s", execute = function()
      ran = true
      b:stop()
      return 1
    end } } }
    -- if the run is never taken, this stops the worker (the test then fails, not hangs); a
    -- durable wait, so that stopping does not wait for it
    b:register{ name = "guard", steps = { { name = "nap", sleep = 10 },
      { name = "g", execute = function() b:stop() return 1 end } } }
    b:start("guard", {})
    b:serve{ poll = 0.01 }
    assert.is_true(ran)
  end)
end)
