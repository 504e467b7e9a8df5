-- Acceptance, from outside: what SPEC sections 6, 11 and 12 promise of idempotency, events,
-- child runs, branches and cancels, through the Lua API on SQLite files and the virtual clock.
local mend = require "mend"
local H = require "spec.helper"

describe("acceptance: idempotency #sqlite", function()
  after_each(H.cleanup)

  it("gives the existing run for a run key, also after a restart", function()
    local eng, path = H.new_engine()
    local calls = 0
    local def = H.one_step("k", { execute = function() calls = calls + 1; return calls end })
    eng:register(def)
    local id1, existed1 = eng:start("k", { n = 1 }, { key = "order-1" })
    local id2, existed2 = eng:start("k", { n = 2 }, { key = "order-1" })
    assert.are.equal(id1, id2)
    assert.falsy(existed1)
    assert.truthy(existed2)
    eng:run()
    assert.are.equal(1, calls)
    H.close(eng)
    local eng2 = H.reopen(path)
    eng2:register(def)
    local id3, existed3 = eng2:start("k", {}, { key = "order-1" })
    assert.are.equal(id1, id3)
    assert.truthy(existed3)
    eng2:run()
    assert.are.equal(1, calls)
  end)

  it("returns a custom key's recorded result without executing, in another run", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register(H.one_step("pay", {
      idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
      execute = function(ctx) calls = calls + 1; return { charged = ctx.input.amount } end,
    }))
    local a = eng:start("pay", { order = 7, amount = 10 })
    eng:run()
    local b = eng:start("pay", { order = 7, amount = 99 })
    eng:run()
    assert.are.equal(1, calls)
    assert.are.same({ charged = 10 }, H.step(eng:status(b), "work").result)
    assert.are.equal("charge-7", H.step(eng:status(a), "work").idempotency_key)
  end)

  -- A reused step's effect is its executing run's (SPEC 6; README, Guarantees: at most once per
  -- step key): the reusing run passes it by on its way back, and once the executing run undid
  -- the key, the next run executes it again.
  local function reusing_order(eng, log)
    eng:register { name = "order", steps = {
      { name = "charge", idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
        execute = function() log.charges = log.charges + 1; return "c-" .. log.charges end,
        compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end },
      { name = "ok", wait_for = "ok", timeout = 10 } } }
  end

  it("compensates a custom key's one execution once, however many runs reused it", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    reusing_order(eng, log)
    local a = eng:start("order", { order = 17 })
    eng:advance(1)
    local b = eng:start("order", { order = 17 })
    eng:run()   -- neither sees "ok": both time out and turn back
    assert.are.same({ "compensated", "compensated" }, { eng:status(a).status,
      eng:status(b).status })
    assert.are.equal(1, log.charges)
    assert.are.same({ a }, log.refunds)
  end)

  it("leaves the effect of a run that succeeded when a run that reused it turns back",
    function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    reusing_order(eng, log)
    local a = eng:start("order", { order = 17 })
    eng:advance(1)
    eng:signal(a, "ok", true)
    eng:advance(1)
    assert.are.equal("succeeded", eng:status(a).status)
    local b = eng:start("order", { order = 17 })
    eng:run()
    assert.are.equal("compensated", eng:status(b).status)
    assert.are.same({}, log.refunds)
  end)

  it("executes a custom key again once the run that executed it undid it", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    reusing_order(eng, log)
    local a = eng:start("order", { order = 17 })
    eng:advance(1)
    local b = eng:start("order", { order = 17 })   -- reuses a's charge
    eng:advance(1)
    eng:signal(b, "ok", true)
    eng:advance(1)
    assert.are.equal("succeeded", eng:status(b).status)
    eng:run()                                      -- a times out and refunds charge-17
    assert.are.same({ a }, log.refunds)
    local c = eng:start("order", { order = 17 })
    eng:advance(1)
    -- not b's row (a reuse) nor a's (compensated): c charges again
    assert.are.equal(2, log.charges)
    assert.are_not.equal("c-1", H.step(eng:status(c), "charge").result)
  end)

  it("never executes a succeeded step again after a restart mid-run", function()
    local eng, path = H.new_engine()
    local calls = { a = 0, b = 0 }
    local def = { name = "two", steps = {
      { name = "a", execute = function() calls.a = calls.a + 1; return "A" end },
      { name = "b", sleep = 100, execute = function(ctx) calls.b = calls.b + 1;
        return ctx.results.a end },
    } }
    eng:register(def)
    local id = eng:start("two", {})
    eng:advance(10)
    assert.are.equal(1, calls.a)
    H.close(eng)
    local eng2 = H.reopen(path)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.same({ a = 1, b = 1 }, calls)
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("A", H.step(st, "b").result)
  end)
end)

describe("acceptance: events #sqlite", function()
  after_each(H.cleanup)

  local function quest(timeout, retry)
    return { name = "quest", steps = {
      { name = "kill", wait_for = "boss", timeout = timeout, retry = retry },
      { name = "loot", execute = function(ctx) return ctx.results.kill end },
    } }
  end

  it("takes an event sent before the wait, once, in the order sent; a key dedupes", function()
    local eng = H.new_engine()
    eng:register({ name = "twice", steps = {
      { name = "w1", wait_for = "e" }, { name = "w2", wait_for = "e" },
      { name = "w3", wait_for = "e", timeout = 5 } } })
    local id = eng:start("twice", {}, { detached = true })
    assert.are.equal("sent", (eng:signal(id, "e", { n = 1 }, { key = "k1" })))
    assert.are.equal("duplicate", (eng:signal(id, "e", { n = 99 }, { key = "k1" })))
    eng:signal(id, "e", { n = 2 })
    eng:recover()
    eng:run()
    local st = eng:status(id)
    assert.are.same({ n = 1 }, H.step(st, "w1").result)
    assert.are.same({ n = 2 }, H.step(st, "w2").result)
    assert.are.equal("failed", H.step(st, "w3").status)   -- no third event: its timeout
    assert.are.equal("timeout", st.reason)
  end)

  it("fails a wait at its deadline with a timeout and compensates", function()
    local eng = H.new_engine()
    local undone = false
    eng:register({ name = "q", steps = {
      { name = "prep", execute = function() return 1 end,
        compensate = function() undone = true end },
      { name = "kill", wait_for = "boss", timeout = 60 } } })
    local id = eng:start("q", {})
    eng:advance(59)
    assert.are.equal("waiting", H.step(eng:status(id), "kill").status)
    eng:advance(2)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.is_true(undone)
    assert.is_nil(H.dlq_entry(eng, id))
  end)

  it("waits again on a timeout with a retry of its own", function()
    local eng = H.new_engine()
    eng:register(quest(10, { max_attempts = 3, jitter = 0 }))
    local id = eng:start("quest", {})
    eng:advance(11)
    eng:advance(1.5)
    assert.are.equal("waiting", H.step(eng:status(id), "kill").status)
    eng:signal(id, "boss", { gold = 5 })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ gold = 5 }, H.step(st, "loot").result)
    assert.are.equal(2, H.step(st, "kill").attempts)
  end)

  it("refuses a signal to a run that ended or does not exist", function()
    local eng = H.new_engine()
    eng:register(H.one_step("one", { execute = function() end }))
    local id = eng:start("one", {})
    eng:run()
    assert.has_error(function() eng:signal(id, "x", 1) end)
    assert.has_error(function() eng:signal("nope", "x", 1) end)
  end)
end)

describe("acceptance: cancel #sqlite", function()
  after_each(H.cleanup)

  it("compensates a waiting run it cancels, reason cancelled", function()
    local eng = H.new_engine()
    local log = {}
    eng:register({ name = "c", steps = {
      { name = "a", execute = function() return "ra" end, compensate = function(_,
        r) log[#log + 1] = "undo a " .. r end },
      { name = "b", execute = function() return "rb" end, compensate = function(_,
        r) log[#log + 1] = "undo b " .. r end },
      { name = "w", wait_for = "never" } } })
    local id = eng:start("c", {})
    eng:advance(1)
    assert.are.equal("cancelled", eng:cancel(id, { who = "ana" }))
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.same({ "undo b rb", "undo a ra" }, log)
  end)

  it("cancels a run waiting in a retry", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register(H.one_step("r", { retry = { initial = 100, jitter = 0 },
      execute = function() calls = calls + 1; error(mend.retryable("busy")) end }))
    local id = eng:start("r", {})
    eng:advance(1)
    eng:cancel(id, { who = "ana" })
    eng:run()
    assert.are.equal(1, calls)
    local st = eng:status(id)
    assert.is_true(st.status == "failed" or st.status == "compensated", st.status)
    assert.are.equal("cancelled", st.reason)
  end)
end)

describe("acceptance: child runs #sqlite", function()
  after_each(H.cleanup)

  local function defs(child_fails, log)
    return {
      { name = "shipping", steps = {
        { name = "label", execute = function(ctx)
            if child_fails then error(mend.fatal("no courier")) end
            return { tracking = "T-" .. ctx.input.order }
          end,
          compensate = function() log[#log + 1] = "undo label" end } } },
      { name = "order", steps = {
        { name = "charge", execute = function() return 1 end,
          compensate = function() log[#log + 1] = "undo charge" end },
        { name = "ship", child = "shipping",
          input = function(ctx) return { order = ctx.input.id } end },
        { name = "after", execute = function(ctx)
            if ctx.input.fail_after then error(mend.fatal("late")) end
            return ctx.results.ship.label.tracking
          end } } },
    }
  end

  it("gives the child's results to the parent's step", function()
    local eng = H.new_engine()
    for _, d in ipairs(defs(false, {})) do eng:register(d) end
    local id = eng:start("order", { id = 9 })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("T-9", H.step(st, "after").result)
    local kids = eng:runs{ workflow = "shipping" }
    assert.are.equal(1, #kids)
    assert.are.equal(id .. "/ship", kids[1].key)
  end)

  it("fails the parent's step when the child compensates", function()
    local eng = H.new_engine()
    local log = {}
    for _, d in ipairs(defs(true, log)) do eng:register(d) end
    local id = eng:start("order", { id = 9 })
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "undo charge" }, log)
  end)

  it("compensates a succeeded child as a whole when the parent turns back", function()
    local eng = H.new_engine()
    local log = {}
    for _, d in ipairs(defs(false, log)) do eng:register(d) end
    local id = eng:start("order", { id = 9, fail_after = true })
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "undo label", "undo charge" }, log)
    local kid = eng:runs{ workflow = "shipping" }[1]
    assert.are.equal("compensated", eng:status(kid.id).status)
    assert.are.equal("parent_compensated", eng:status(kid.id).reason)
  end)
end)

describe("acceptance: branches #sqlite", function()
  after_each(H.cleanup)

  it("skips a step when says no, never compensates it, compensates a group latest first",
    function()
      local eng = H.new_engine()
      local log = {}
      local function s(name, extra)
        local t = { name = name, execute = function() log[#log + 1] = "do " .. name;
          return name end,
                    compensate = function() log[#log + 1] = "undo " .. name end }
        for k, v in pairs(extra or {}) do t[k] = v end
        return t
      end
      eng:register({ name = "g", steps = {
        s("first"),
        s("gift", { when = function() return false end }),
        { name = "grp", parallel = { s("x"), s("y") } },
        { name = "boom", execute = function() error(mend.fatal("stop")) end } } })
      local id = eng:start("g", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.are.equal("skipped", H.step(st, "gift").status)
      assert.is_nil(H.index_of(log, "do gift"))
      assert.is_nil(H.index_of(log, "undo gift"))
      assert.are.equal("undo first", log[#log])
      assert.truthy(H.index_of(log, "undo x") and H.index_of(log, "undo y"))
    end)
end)
