-- Repairs by people through the Lua API: retrying and resolving dead letters, cancelling runs,
-- overriding breakers. Each is recorded with who did it, and refused when it makes no sense.
local H = require "spec.helper"
local mend = require "mend"

local function operator_entries(eng, id)
  local out = {}
  for _, h in ipairs(eng:history(id)) do
    if h.event == "operator" then out[#out + 1] = h.detail end
  end
  return out
end

-- A saga whose refund fails while `box.refund_broken` is set, and whose last step fails.
local function broken_refund(box)
  return { name = "refund", compensate_retry = { max_attempts = 2, initial = 1, jitter = 0 }, steps = {
    { name = "reserve", execute = function() return "r" end,
      compensate = function() box.released = (box.released or 0) + 1 end },
    { name = "charge", execute = function() return "c" end,
      compensate = function()
        if box.refund_broken then error(mend.retryable("refund service down")) end
        box.refunded = (box.refunded or 0) + 1
      end },
    { name = "ship", execute = function() error(mend.fatal("no courier")) end },
  } }
end

describe("mend dlq retry", function()
  after_each(H.cleanup)

  it("resumes a failed compensation with fresh attempts and finishes it in reverse", function()
    local box = { refund_broken = true }
    local eng = H.new_engine()
    eng:register(broken_refund(box))
    local id = eng:start("refund", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    assert.are.equal(1, #eng:dlq())
    box.refund_broken = false                     -- a person fixed the refund service
    eng:dlq_retry(id, { who = "ops@test" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    -- why it turned back, as for a run whose refund never failed: not the refund's old error
    assert.are.equal("fatal: no courier", st.error)
    assert.are.equal(1, box.refunded)
    assert.are.equal(1, box.released)
    assert.are.equal("compensated", H.step(st, "charge").status)
    assert.are.equal(1, H.step(st, "charge").comp_attempts)   -- fresh attempts
    assert.are.equal(0, #eng:dlq())
    assert.are.same({ "dlq retry by ops@test" }, operator_entries(eng, id))
  end)

  -- A step that failed compensable had partly applied: it is compensated too, also when its
  -- own compensation is what failed and a person retries the run in another process.
  it("compensates a failed compensable step whose own compensation had failed, after a restart", function()
    local box = { undo_broken = true }
    local first, db = H.new_engine()
    local workflow = { name = "partial", compensate_retry = { max_attempts = 2, initial = 1, jitter = 0 },
      steps = {
        { name = "reserve", execute = function() return "r" end,
          compensate = function() box.released = (box.released or 0) + 1 end },
        { name = "ship", execute = function() error(mend.compensable("half shipped")) end,
          compensate = function()
            if box.undo_broken then error(mend.retryable("courier api down")) end
            box.unshipped = (box.unshipped or 0) + 1
          end },
      } }
    first:register(workflow)
    local id = first:start("partial", {})
    first:run()
    assert.are.equal("needs_attention", first:status(id).status)
    assert.are.equal("compensation_failed", first:status(id).reason)
    assert.is_nil(box.unshipped)
    first:close()
    box.undo_broken = false
    local eng = H.reopen(db)
    eng:register(workflow)
    eng:dlq_retry(id, { who = "ops" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal(1, box.unshipped)
    assert.are.equal(1, box.released)
    assert.are.equal("compensated", H.step(st, "ship").status)
  end)

  it("retries a severity-3 step with fresh attempts", function()
    local fixed = false
    local eng = H.new_engine()
    eng:register{ name = "s3", steps = {
      { name = "a", execute = function() return 1 end },
      { name = "b", execute = function()
          if not fixed then error(mend.compensable("half done", { severity = 3 })) end
          return 2
        end },
    } }
    local id = eng:start("s3", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    fixed = true
    eng:dlq_retry(id, { who = "ops" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(1, H.step(st, "b").attempts)
  end)

  it("refuses what makes no sense, saying why", function()
    local eng = H.new_engine()
    eng:register{ name = "ok", steps = { { name = "a", execute = function() return 1 end } } }
    eng:register{ name = "exhausted", retry = { max_attempts = 2, initial = 1, jitter = 0 }, steps = {
      { name = "a", execute = function() error(mend.retryable("down")) end } } }
    local ok = eng:start("ok", {})
    local ex = eng:start("exhausted", {})
    eng:run()
    -- the Lua method's refusals name it (mend dlq retry's own words: operate_cli_spec)
    assert.has_error(function() eng:dlq_retry(ok) end,
      "dlq_retry: run " .. ok .. " is succeeded: only a run in the dead-letter queue can be retried")
    local ok2, err = pcall(eng.dlq_retry, eng, ex)
    assert.is_false(ok2)
    assert.matches("attempts ran out", err)
    assert.has_error(function() eng:dlq_retry("nope") end, "dlq_retry: no run nope")
  end)
end)

describe("mend dlq resolve", function()
  after_each(H.cleanup)

  it("takes a run out of the queue with a note, recorded in its history", function()
    local eng, db = H.new_engine()
    eng:register(broken_refund({ refund_broken = true }))
    local id = eng:start("refund", {})
    eng:run()
    eng:resolve(id, { note = "refunded by hand in the PSP console", who = "ana" })
    local st = eng:status(id)
    assert.are.equal("resolved", st.status)
    assert.are.equal(0, #eng:dlq())
    assert.are.same({ "dlq resolve by ana: refunded by hand in the PSP console" }, operator_entries(eng, id))
    -- the Lua method's refusals name it; mend dlq resolve says what it refused in its own words
    local why = "run " .. id .. " is resolved: only a run in the dead-letter queue, or one that"
      .. " cannot progress (mend runs --attention), can be resolved"
    assert.has_error(function() eng:resolve(id, { note = "again" }) end, "resolve: " .. why)
    local rc, out = H.mend_cmd(db, "dlq resolve " .. id .. " --note again")
    assert.are.equal(1, rc, out)
    assert.are.equal("mend: " .. why .. "\n", out)
  end)

  it("needs a note", function()
    local eng = H.new_engine()
    eng:register(broken_refund({ refund_broken = true }))
    local id = eng:start("refund", {})
    eng:run()
    assert.has_error(function() eng:resolve(id, {}) end,
      "resolve: resolving a run needs a note saying what was done")
  end)
end)

describe("cancel", function()
  after_each(H.cleanup)
  local undone
  -- a step that records its compensation in `undone`; with `wait`, its execute parks an hour
  local function step(name, wait)
    return { name = name,
      execute = function() if wait then mend.sleep(3600) end return name end,
      compensate = function(_, r) undone[#undone + 1] = r end }
  end

  it("stops a running run and compensates what it did, in reverse", function()
    undone = {}
    local eng = H.new_engine()
    eng:register{ name = "long", steps = { step("a"), step("b"), step("c", true) } }
    local id = eng:start("long", {})
    eng:advance(10)
    assert.are.equal("running", H.step(eng:status(id), "c").status)
    assert.are.equal("cancelled", eng:cancel(id, { who = "ops" }))
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.same({ "b", "a" }, undone)
    assert.are.equal("failed", H.step(st, "c").status)
    assert.are.same({ "cancel by ops" }, operator_entries(eng, id))
    assert.has_error(function() eng:cancel(id) end,
      "cancel: run " .. id .. " is compensated: only a running run can be cancelled")
  end)

  it("of a run no live engine holds, past its first step, compensates what it did", function()
    -- its worker stopped with step b in flight; the cancel comes from another engine
    undone = {}
    local def = { name = "long", steps = { step("a"), step("b", true), step("c") } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("long", {})
    eng:advance(10)
    assert.are.equal("running", H.step(eng:status(id), "b").status)
    H.close(eng)
    local other = H.reopen(db)
    other:register(def)
    assert.are.equal("cancelled", other:cancel(id, { who = "ops" }))
    other:run()
    local st = other:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.same({ "a" }, undone)
    assert.are.same({ "compensated", "failed", "pending" },
      { H.step(st, "a").status, H.step(st, "b").status, H.step(st, "c").status })
  end)

  it("of a run another live engine holds, asks that engine", function()
    local eng, db = H.new_engine({ lease = 60 })
    eng:register{ name = "w", steps = { { name = "s", execute = function() mend.sleep(60) end } } }
    local id = eng:start("w", {})
    eng:advance(1)
    local other = H.reopen(db)
    assert.are.equal("requested", other:cancel(id, { who = "ops" }))
    assert.are.same({ "cancel requested by ops" }, operator_entries(other, id))
    assert.are.same({ "1" }, H.sql(db, "SELECT cancel_requested FROM runs WHERE id = '" .. id .. "'"))
  end)
end)

describe("a cancelled run stopped mid-compensation", function()
  after_each(H.cleanup)

  it("finishes its compensation after a restart", function()
    local def = { name = "w", steps = {
      { name = "a", execute = function() return 1 end,
        compensate = function(ctx) if ctx.attempt == 1 then mend.sleep(100) end end },
      { name = "b", execute = function() mend.sleep(50) return 2 end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("w", {})
    eng:advance(1)
    eng:cancel(id)
    eng:advance(1)
    assert.are.equal("compensating", eng:status(id).status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
  end)
end)

describe("a wait where Lua cannot yield", function()
  after_each(H.cleanup)

  it("is refused with a clear error, and nothing it started reaches a later attempt", function()
    local eng = H.new_engine({ clock = "real" })
    local caught
    eng:register{ name = "g", retry = { initial = 0.05, jitter = 0 }, steps = {
      { name = "a", execute = function()
          local ok, err = pcall(string.gsub, "a", "a", function() return mend.exec{ "sleep", "0.2" } end)
          caught = err
          return ok
        end },
      { name = "b", execute = function(ctx)
          if ctx.attempt == 1 then error(mend.retryable("later")) end
          mend.sleep(0.3)
          return "b done"
        end },
    } }
    local id = eng:start("g", {})
    eng:run()
    assert.matches("mend.exec: cannot wait here", caught)
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("b done", st.steps[2].result)
  end)
end)

describe("breaker overrides", function()
  after_each(H.cleanup)

  it("open a breaker by hand (attempts wait), reset it (they go), and audit who did it", function()
    local calls = 0
    local eng, db = H.new_engine()
    eng:register{ name = "b", steps = {
      { name = "call", breaker = "payments", execute = function() calls = calls + 1; return calls end } } }
    eng:start("b", {})
    eng:run()
    eng:breaker("payments", "open", { seconds = 600, who = "ops" })
    local id = eng:start("b", {})
    eng:advance(60)
    assert.are.equal("breaker_open", H.step(eng:status(id), "call").status)
    assert.are.equal(1, calls)
    eng:breaker("payments", "reset", { who = "ops" })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local audit = eng:audit()
    assert.are.same({ "open", "reset" }, { audit[1].op, audit[2].op })
    assert.are.same({ "ops", "ops" }, { audit[1].who, audit[2].who })
    assert.are.equal("payments", audit[1].target)
    -- the Lua method's refusals name it; mend breakers says what it refused in its own words
    assert.has_error(function() eng:breaker("nope", "open") end,
      "breaker: no breaker nope (a breaker exists once a step using it has run)")
    assert.has_error(function() eng:breaker("payments", "flip") end,
      "breaker: breaker operation must be reset, open or close, got flip")
    assert.has_error(function() eng:breaker("nope", "flip") end,   -- (had been "no breaker nope")
      "breaker: breaker operation must be reset, open or close, got flip")
    local rc, out = H.mend_cmd(db, "breakers open nope")
    assert.are.equal(1, rc, out)
    assert.are.equal("mend: no breaker nope (a breaker exists once a step using it has run)\n",
                     out)
  end)
end)

describe("listing runs", function()
  after_each(H.cleanup)

  it("filters by status, workflow, time and attention", function()
    local eng = H.new_engine()
    eng:register{ name = "fine", steps = { { name = "a", execute = function() return 1 end } } }
    eng:register(broken_refund({ refund_broken = true }))
    local t0 = eng:now()
    local a = eng:start("fine", {})
    local b = eng:start("refund", {})
    eng:run()
    assert.are.equal(2, #eng:runs())
    assert.are.equal(a, eng:runs{ status = "succeeded" }[1].id)
    assert.are.equal(b, eng:runs{ workflow = "refund" }[1].id)
    assert.are.equal(b, eng:runs{ attention = true }[1].id)
    assert.are.equal(1, #eng:runs{ attention = true })
    assert.are.equal(0, #eng:runs{ since = t0 + 3600 })
  end)
end)
