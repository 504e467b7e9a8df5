-- Sagas: when a step fails for good, the completed steps are undone in reverse order; runs a
-- machine cannot settle go to the dead-letter queue.
local mend = require "mend"
local H = require "spec.helper"

-- A saga of four steps: reserve_stock, charge_card, ship_parcel, notify_buyer. Each execute
-- returns a result naming its step; `fail` (a table by step name) says how a step fails:
-- a function returning an error, called with the call count. Each compensate appends
-- { step, result, compensating, key } to `log.comp`; `comp_fail[name]` makes it raise.
local STEPS = { "reserve_stock", "charge_card", "ship_parcel", "notify_buyer" }

local function saga(log, fail, comp_fail, extra)
  log.comp, log.calls, log.keys = {}, {}, {}
  local steps = {}
  for _, name in ipairs(STEPS) do
    log.calls[name] = 0
    steps[#steps + 1] = {
      name = name,
      execute = function(ctx)
        log.calls[name] = log.calls[name] + 1
        log.keys[name] = ctx.idempotency_key
        local f = fail[name]
        if f then
          local e = f(log.calls[name])
          if e then error(e) end
        end
        return { done = name, n = #steps }
      end,
      compensate = function(ctx, result)
        log.comp[#log.comp + 1] = { step = name, result = result,
          compensating = ctx.compensating, key = ctx.idempotency_key }
        if comp_fail and comp_fail[name] then error(comp_fail[name]) end
      end,
    }
  end
  local def = { name = "saga", retry = { jitter = 0 }, steps = steps }
  for k, v in pairs(extra or {}) do def[k] = v end
  return def
end

local function comp_order(log)
  local out = {}
  for _, c in ipairs(log.comp) do out[#out + 1] = c.step end
  return out
end

local function always(e) return function() return e end end

describe("a saga", function()
  after_each(H.cleanup)

  it("compensates the completed steps in reverse order, each with the result it recorded",
    function()
      local eng = H.new_engine()
      local log = {}
      eng:register(saga(log, { notify_buyer = always(mend.fatal("no such buyer")) }))
      local id = eng:start("saga", {})
      eng:run()
      assert.are.same({ "ship_parcel", "charge_card", "reserve_stock" }, comp_order(log))
      for _, c in ipairs(log.comp) do
        assert.are.same({ done = c.step, n = 4 }, c.result)
        assert.is_true(c.compensating)
        assert.are.equal(log.keys[c.step], c.key)
      end
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      for _, name in ipairs { "reserve_stock", "charge_card", "ship_parcel" } do
        assert.are.equal("compensated", H.step(st, name).status)
      end
      assert.are.equal("failed", H.step(st, "notify_buyer").status)
      -- the way back is in the history: succeeded -> compensating -> compensated
      for _, name in ipairs { "reserve_stock", "charge_card", "ship_parcel" } do
        local t = H.transitions(eng, id, name)
        local a = H.index_of(t, "succeeded->compensating")
        local b = H.index_of(t, "compensating->compensated")
        assert.is_not_nil(a, name .. ": " .. table.concat(t, ", "))
        assert.is_not_nil(b, name .. ": " .. table.concat(t, ", "))
        assert.is_true(a < b)
      end
      assert.is_nil(H.dlq_entry(eng, id))
    end)

  it("does not retry a fatal error: one attempt, then compensation", function()
    local eng = H.new_engine()
    local log = {}
    eng:register(saga(log, { ship_parcel = always(mend.fatal("address invalid")) },
      nil, { retry = { max_attempts = 5, jitter = 0 } }))
    local t0 = eng:now()
    local id = eng:start("saga", {})
    eng:run()
    assert.are.equal(1, log.calls.ship_parcel)
    assert.are.equal(0, log.calls.notify_buyer)
    local st = eng:status(id)
    assert.are.equal(1, H.step(st, "ship_parcel").attempts)
    assert.matches("address invalid", H.step(st, "ship_parcel").error)
    assert.are.equal("compensated", st.status)
    assert.are.same({ "charge_card", "reserve_stock" }, comp_order(log))
    assert.are.same({}, H.retry_delays(eng, id, "ship_parcel"))
    assert.near(0, eng:now() - t0, 1e-3)
  end)

  it("fails the run when the first step fails fatally: there is nothing to compensate",
    function()
      local eng = H.new_engine()
      local log = {}
      eng:register(saga(log, { reserve_stock = always(mend.fatal("out of stock")) }))
      local id = eng:start("saga", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("failed", st.status)
      assert.are.equal(1, log.calls.reserve_stock)
      assert.are.same({}, log.comp)
      assert.are.equal("failed", H.step(st, "reserve_stock").status)
      assert.is_nil(H.dlq_entry(eng, id))
    end)

  it("skips a step without compensate and records the skip", function()
    local eng = H.new_engine()
    local undone = {}
    eng:register {
      name = "partial",
      steps = {
        { name = "a", execute = function() return 1 end,
          compensate = function() undone[#undone + 1] = "a" end },
        { name = "b", execute = function() return 2 end },
        { name = "c", execute = function() error(mend.fatal("no")) end },
      },
    }
    local id = eng:start("partial", {})
    eng:run()
    assert.are.same({ "a" }, undone)
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.equal(1, #H.events(eng, id, { event = "skip_compensate", step = "b" }))
  end)

  it("compensates in reverse and dead-letters the run when attempts are exhausted", function()
    local eng = H.new_engine()
    local log = {}
    eng:register(saga(log, { ship_parcel = always(mend.retryable("carrier down")) }, nil,
      { retry = { max_attempts = 3, initial = 1, multiplier = 2, jitter = 0 } }))
    local id = eng:start("saga", {})
    eng:run()
    assert.are.equal(3, log.calls.ship_parcel)
    assert.are.same({ 1, 2 }, H.retry_delays(eng, id, "ship_parcel"))
    assert.are.same({ "charge_card", "reserve_stock" }, comp_order(log))
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal(3, H.step(st, "ship_parcel").attempts)
    assert.are.equal("failed", H.step(st, "ship_parcel").status)
    assert.are.equal("compensated", H.step(st, "charge_card").status)
    assert.are.equal("compensated", H.step(st, "reserve_stock").status)
    local d = H.dlq_entry(eng, id)
    assert.is_not_nil(d)
    assert.are.equal("attempts_exhausted", d.reason)
    assert.are.equal("ship_parcel", d.step)
    assert.matches("carrier down", d.error)
  end)
end)

describe("a compensable error", function()
  after_each(H.cleanup)

  local function run_severity(sev)
    local eng, alerts = H.engine_with_alerts()
    local log = {}
    eng:register(saga(log, { ship_parcel = always(
      mend.compensable("half shipped", { severity = sev })) }))
    local id = eng:start("saga", {})
    eng:run()
    return eng, id, log, alerts
  end

  it("of severity 1 compensates the failing step too, without an alert", function()
    local eng, id, log, alerts = run_severity(1)
    assert.are.equal(1, log.calls.ship_parcel)
    assert.are.same({ "ship_parcel", "charge_card", "reserve_stock" }, comp_order(log))
    -- the failing step recorded no result
    assert.is_nil(log.comp[1].result)
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("compensated", H.step(st, "ship_parcel").status)
    assert.are.same({}, alerts)
    assert.is_nil(H.dlq_entry(eng, id))
  end)

  it("of severity 2 compensates the failing step too and raises an alert", function()
    local eng, id, log, alerts = run_severity(2)
    assert.are.same({ "ship_parcel", "charge_card", "reserve_stock" }, comp_order(log))
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    local a = H.alerts_of(alerts, "compensated_with_alert")
    assert.are.equal(1, #a)
    assert.are.equal(id, a[1].run_id)
    assert.are.equal("saga", a[1].workflow)
    assert.are.equal("ship_parcel", a[1].step)
    assert.is_nil(H.dlq_entry(eng, id))
  end)

  it("of severity 3 compensates nothing and sends the run to the dead-letter queue",
    function()
      local eng, id, log = run_severity(3)
      assert.are.same({}, log.comp)
      local st = eng:status(id)
      assert.are.equal("needs_attention", st.status)
      for _, name in ipairs { "reserve_stock", "charge_card" } do
        assert.are.equal("succeeded", H.step(st, name).status)
      end
      local d = H.dlq_entry(eng, id)
      assert.is_not_nil(d)
      assert.are.equal("severity_3", d.reason)
      assert.are.equal("ship_parcel", d.step)
      assert.matches("half shipped", d.error)
    end)
end)

describe("a failing compensation", function()
  after_each(H.cleanup)

  it("is retried by its policy (3 attempts, 1 s then 2 s), then dead-letters the run naming "
    .. "the steps left uncompensated, with one alert", function()
    local eng, alerts = H.engine_with_alerts()
    local log = {}
    eng:register(saga(log, { notify_buyer = always(mend.fatal("no such buyer")) },
      { charge_card = mend.retryable("refund service down") }))
    local t0 = eng:now()
    local id = eng:start("saga", {})
    eng:run()

    local tries = 0
    for _, c in ipairs(log.comp) do
      if c.step == "charge_card" then tries = tries + 1 end
    end
    assert.are.equal(3, tries)
    assert.are.equal("ship_parcel", log.comp[1].step)
    assert.near(3, eng:now() - t0, 1e-3)

    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("compensated", H.step(st, "ship_parcel").status)
    local charge = H.step(st, "charge_card")
    assert.are.equal("compensation_failed", charge.status)
    assert.are.equal(3, charge.comp_attempts)

    local d = H.dlq_entry(eng, id)
    assert.is_not_nil(d)
    assert.are.equal("compensation_failed", d.reason)
    assert.are.equal("charge_card", d.step)
    local said = tostring(d.detail) .. " " .. tostring(d.error)
    assert.matches("refund service down", said)
    -- every step that executed and is not compensated is named
    for _, name in ipairs { "reserve_stock", "charge_card", "ship_parcel" } do
      local s = H.step(st, name)
      if s.status ~= "compensated" then
        assert.is_truthy(said:find(name, 1, true), name .. " not named in: " .. said)
      end
    end

    assert.are.equal(1, #H.alerts_of(alerts, "dead_letter"))
    assert.are.equal(id, H.alerts_of(alerts, "dead_letter")[1].run_id)
  end)

  it("is not retried when it fails with a fatal or an unknown error: one attempt, then the "
    .. "dead-letter queue", function()
    for _, e in ipairs { mend.fatal("refund refused: the card is closed"), "attempt to index nil",
                         mend.compensable("half refunded", { severity = 1 }) } do
      local eng = H.new_engine()
      local log = {}
      eng:register(saga(log, { notify_buyer = always(mend.fatal("no such buyer")) },
        { charge_card = e }))
      local t0 = eng:now()
      local id = eng:start("saga", {})
      eng:run()
      assert.are.same({ "ship_parcel", "charge_card" }, comp_order(log))
      assert.near(0, eng:now() - t0, 1e-3)
      local st = eng:status(id)
      assert.are.equal("needs_attention", st.status)
      assert.are.equal("compensation_failed", H.step(st, "charge_card").status)
      assert.are.equal(1, H.step(st, "charge_card").comp_attempts)
      assert.are.equal(0, #H.events(eng, id, { event = "compensate_failed" }))
      assert.are.equal("compensation_failed", H.dlq_entry(eng, id).reason)
    end
  end)

  it("waits as long as a retryable error's retry_after says, clamped by max_retry_after",
    function()
    local eng = H.new_engine()
    local at = {}
    eng:register {
      name = "advised",
      steps = {
        { name = "a", execute = function() return 1 end,
          compensate_retry = { max_attempts = 3, initial = 1, jitter = 0, max_retry_after = 60 },
          compensate = function(ctx)
            at[#at + 1] = ctx:now()
            if ctx.attempt == 1 then error(mend.retryable("refunds paused", { retry_after = 20 })) end
            if ctx.attempt == 2 then error(mend.retryable("refunds paused", { retry_after = 600 })) end
          end },
        { name = "b", execute = function() error(mend.fatal("no")) end },
      },
    }
    local id = eng:start("advised", {})
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    local delays = {}
    for _, h in ipairs(H.events(eng, id, { event = "compensate_failed", step = "a" })) do
      delays[#delays + 1] = h.delay
    end
    assert.are.same({ 20, 60 }, delays)
    assert.near(20, at[2] - at[1], 1e-3)
    assert.near(60, at[3] - at[2], 1e-3)
  end)

  it("follows the step's compensate_retry policy", function()
    local eng = H.new_engine()
    local tries = 0
    eng:register {
      name = "custom",
      steps = {
        { name = "a", execute = function() return 1 end,
          compensate_retry = { max_attempts = 2, initial = 5, jitter = 0 },
          compensate = function()
            tries = tries + 1
            error(mend.retryable("still down"))
          end },
        { name = "b", execute = function() error(mend.fatal("no")) end },
      },
    }
    local t0 = eng:now()
    local id = eng:start("custom", {})
    eng:run()
    assert.are.equal(2, tries)
    assert.near(5, eng:now() - t0, 1e-3)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("compensation_failed", H.step(st, "a").status)
    assert.are.equal(2, H.step(st, "a").comp_attempts)
    assert.are.equal("compensation_failed", H.dlq_entry(eng, id).reason)
  end)
end)

describe("a step compensated after a failed compensation attempt", function()
  after_each(H.cleanup)

  it("shows its own failure as its error, not the compensation attempt's (kept in its history)",
    function()
      local eng = H.new_engine()
      local log = {}
      local tries = { charge_card = 0, ship_parcel = 0 }
      local def = saga(log, { ship_parcel = always(mend.compensable("half shipped")) })
      for _, s in ipairs(def.steps) do
        local undo = s.compensate
        if tries[s.name] then
          s.compensate_retry = { max_attempts = 3, initial = 1, jitter = 0 }
          s.compensate = function(ctx, result)
            undo(ctx, result)
            tries[s.name] = tries[s.name] + 1
            if tries[s.name] == 1 then error(mend.retryable(s.name .. " refund down")) end
          end
        end
      end
      eng:register(def)
      local id = eng:start("saga", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      local charge, ship = H.step(st, "charge_card"), H.step(st, "ship_parcel")
      assert.are.same({ "compensated", 2, nil, nil },
        { charge.status, charge.comp_attempts, charge.error, charge.error_kind })
      assert.are.same({ "compensated", 2, "compensable" },
        { ship.status, ship.comp_attempts, ship.error_kind })
      assert.matches("half shipped", ship.error)
      local failed = {}
      for _, h in ipairs(H.events(eng, id, { event = "compensate_failed" })) do
        failed[#failed + 1] = h.step .. ": " .. h.error
      end
      assert.are.same({ "ship_parcel: retryable: ship_parcel refund down",
                        "charge_card: retryable: charge_card refund down" }, failed)
    end)
end)
