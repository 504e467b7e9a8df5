-- A step whose custom idempotency key already succeeded elsewhere reuses that result (SPEC
-- section 6), and the effect stays the run's that executed it: only that run compensates it,
-- once; a run that reused passes it by on its way back, and says where its result came from.
-- Not tagged #sqlite: these run on PostgreSQL too (busted_specs_pg).
local mend = require "mend"
local H = require "spec.helper"
local R = require "spec.support.orders"   -- the order workflow: a keyed charge, a wait

local function skips(eng, id, step)
  local out = {}
  for _, h in ipairs(H.events(eng, id, { event = "skip_compensate", step = step })) do
    out[#out + 1] = h.detail
  end
  return out
end

describe("a reused step's result", function()
  after_each(H.cleanup)

  it("says in status and history which run it came from, and is passed by on the way back",
    function()
    local eng, log = R.engine()
    local a = R.start(eng, 5)
    local b = R.start(eng, 5)
    local sa, sb = H.step(eng:status(a), "charge"), H.step(eng:status(b), "charge")
    assert.is_nil(sa.reused)
    assert.is_true(sb.reused)
    assert.are.equal(a, sb.reused_from)
    assert.are.equal("c-1", sb.result)
    assert.are.equal(0, sb.attempts)
    assert.are.equal(1, #H.events(eng, b, { event = "reused", step = "charge", detail = a }))
    eng:run()
    assert.are.same({ a }, log.refunds)
    assert.are.same({ "result reused from run " .. a .. ": that run owns its effect" },
      skips(eng, b, "charge"))
    assert.are.same({}, skips(eng, a, "charge"))
    -- b's row stays succeeded (nothing of b's was undone); a's was compensated
    assert.are.equal("succeeded", H.step(eng:status(b), "charge").status)
    assert.are.equal("compensated", H.step(eng:status(a), "charge").status)
  end)

  it("is named by mend status: the run it came from", function()
    local eng, log, db = R.engine()
    local a = R.start(eng, 6)
    local b = R.start(eng, 6)
    H.close(eng)
    local rc, out = H.mend_cmd(db, "status " .. b)
    assert.are.equal(0, rc)
    assert.matches("charge%s+succeeded%s+attempts 0.*reused from run " .. a, out)
    local _, out_a = H.mend_cmd(db, "status " .. a)
    assert.not_matches("reused from", out_a)
  end)

  it("is named by mend history where the way back passes it by", function()
    local eng, _, db = R.engine()
    local a = R.start(eng, 7)
    local b = R.start(eng, 7)
    eng:run()
    H.close(eng)
    local rc, out = H.mend_cmd(db, "history " .. b)
    assert.are.equal(0, rc)
    assert.matches("charge%s+not compensated: result reused from run " .. a
                   .. ": that run owns its effect", out)
    assert.not_matches("no compensate function", out)
  end)

  it("is not taken from a run that is compensating: the key executes again", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    local gate = {}
    eng:register { name = "slow_undo", steps = {
      { name = "charge", idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
        execute = function() log.charges = log.charges + 1; return "c-" .. log.charges end,
        compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end },
      { name = "tidy", execute = function() return 1 end,
        compensate = function() if not gate.open then mend.sleep(50) end end },
      { name = "boom", execute = function() error(mend.fatal("no")) end } } }
    local a = eng:start("slow_undo", { order = 8 })
    eng:advance(1)   -- a turned back and undoes tidy: charge-8 is still succeeded in its row
    assert.are.equal("compensating", eng:status(a).status)
    assert.are.equal("succeeded", H.step(eng:status(a), "charge").status)
    eng:register(R.order_def(log))
    local b = R.start(eng, 8)
    assert.are.equal(2, log.charges)
    assert.is_nil(H.step(eng:status(b), "charge").reused)
    eng:run()
    table.sort(log.refunds)
    local both = { a, b }
    table.sort(both)
    assert.are.same(both, log.refunds)   -- each its own execution, once
  end)

  it("is never taken from a reuse: the executing run's compensated row ends it", function()
    local eng, log = R.engine()
    local a = R.start(eng, 3)
    local b = R.start(eng, 3)
    eng:signal(b, "ok", true)
    eng:advance(1)
    eng:advance(10)   -- a times out and refunds
    assert.are.same({ a }, log.refunds)
    local c = R.start(eng, 3)
    assert.are.equal(2, log.charges)
    assert.are.equal("c-2", H.step(eng:status(c), "charge").result)
    -- a fourth run reuses c's, the one execution whose effect is there
    local d = R.start(eng, 3)
    assert.are.equal(c, H.step(eng:status(d), "charge").reused_from)
  end)

  it("is passed by in a parallel group's backward walk", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    local function def(fail)
      return { name = fail and "g_fail" or "g", steps = {
        { name = "prepare", parallel = {
          { name = "pay", idempotency_key = function(ctx) return "pay-" .. ctx.input.o end,
            execute = function() log.charges = log.charges + 1; return log.charges end,
            compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end },
          { name = "pack", execute = function() return "p" end,
            compensate = function(ctx) log.refunds[#log.refunds + 1] = "pack " .. ctx.run_id end },
        } },
        { name = "end", execute = function() if fail then error(mend.fatal("no")) end end } } }
    end
    eng:register(def(false))
    eng:register(def(true))
    local a = eng:start("g", { o = 1 })
    eng:run()
    assert.are.equal("succeeded", eng:status(a).status)
    local b = eng:start("g_fail", { o = 1 })
    eng:run()
    assert.are.equal("compensated", eng:status(b).status)
    assert.are.equal(1, log.charges)
    assert.are.same({ "pack " .. b }, log.refunds)
    assert.are.equal(1, #skips(eng, b, "prepare/pay"))
  end)

  it("is passed by among a map's items, each item its own key", function()
    local eng = H.new_engine()
    local log = { charges = {}, refunds = {} }
    local function def(name, fail)
      return { name = name, steps = {
        { name = "m", map = function(ctx) return ctx.input.items end, step = {
          idempotency_key = function(ctx) return "item-" .. ctx.input.items[tonumber(
            ctx.step:match("/(%d+)$"))] end,
          execute = function(_, item) log.charges[#log.charges + 1] = item; return item end,
          compensate = function(ctx, r)
            log.refunds[#log.refunds + 1] = ctx.run_id .. ":" .. r
          end } },
        { name = "end", execute = function() if fail then error(mend.fatal("no")) end end } } }
    end
    eng:register(def("m_ok", false))
    eng:register(def("m_fail", true))
    local a = eng:start("m_ok", { items = { 1, 2 } })
    eng:run()
    local b = eng:start("m_fail", { items = { 2, 3 } })   -- reuses item 2, executes 3
    eng:run()
    assert.are.same({ 1, 2, 3 }, log.charges)
    assert.are.same({ b .. ":3" }, log.refunds)
    assert.are.equal(1, #skips(eng, b, "m/1"))
    local st = eng:status(b)
    assert.are.equal(a, H.step(st, "m/1").reused_from)
  end)

  it("is still another run's after a restart between the reuse and the way back", function()
    local eng, log, db = R.engine()
    local a = R.start(eng, 11)
    eng:signal(a, "ok", true)
    eng:advance(1)
    local b = R.start(eng, 11)
    assert.are.equal(a, H.step(eng:status(b), "charge").reused_from)
    H.close(eng)
    local eng2 = R.restart(db, log)
    eng2:run()   -- b times out and turns back
    assert.are.equal("compensated", eng2:status(b).status)
    assert.are.equal("succeeded", eng2:status(a).status)
    assert.are.same({}, log.refunds)
    assert.are.same({ "result reused from run " .. a .. ": that run owns its effect" },
      skips(eng2, b, "charge"))
    -- and a new run after the restart reuses a's still
    local c = R.start(eng2, 11)
    assert.are.equal(1, log.charges)
    assert.are.equal(a, H.step(eng2:status(c), "charge").reused_from)
  end)

  it("is still another run's after a restart, in a group's branch and a map's item", function()
    local eng, db = H.new_engine()
    local log = { refunds = {}, calls = 0 }
    local function def(name, wait)
      local steps = {
        { name = "g", parallel = {
          { name = "pay", idempotency_key = function(ctx) return "pay-" .. ctx.input.o end,
            execute = function() log.calls = log.calls + 1; return "p" end,
            compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id .. " pay" end },
          { name = "note", execute = function() return "n" end } } },
        { name = "m", map = function() return { 1 } end, step = {
          idempotency_key = function(ctx) return "item-" .. ctx.input.o end,
          execute = function() log.calls = log.calls + 1; return "i" end,
          compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id .. " item" end } } }
      if wait then steps[#steps + 1] = { name = "ok", wait_for = "ok", timeout = 10 } end
      return { name = name, steps = steps }
    end
    eng:register(def("first", false))
    eng:register(def("second", true))
    local a = eng:start("first", { o = 4 })
    eng:run()
    local b = eng:start("second", { o = 4 })
    eng:advance(1)
    assert.are.equal(2, log.calls)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def("first", false))
    eng2:register(def("second", true))
    eng2:recover()
    eng2:run()   -- b times out and turns back
    assert.are.equal("compensated", eng2:status(b).status)
    assert.are.same({}, log.refunds)
    local why = "result reused from run " .. a .. ": that run owns its effect"
    assert.are.same({ why }, skips(eng2, b, "g/pay"))
    assert.are.same({ why }, skips(eng2, b, "m/1"))
  end)

  -- A run stopped by a failed compensation (needs_attention) is still going back: a dlq retry
  -- undoes the rest of its steps. Its key is not offered meanwhile.
  it("is not taken from a run in needs_attention: the key executes again", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    local broken = true
    eng:register { name = "undo_fails", steps = {
      { name = "charge", idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
        execute = function() log.charges = log.charges + 1; return "c-" .. log.charges end,
        compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end },
      { name = "tidy", execute = function() return 1 end,
        compensate = function() if broken then error(mend.fatal("tidy broken")) end end },
      { name = "boom", execute = function() error(mend.fatal("no")) end } } }
    eng:register(R.order_def(log))
    local a = eng:start("undo_fails", { order = 12 })
    eng:run()
    assert.are.equal("needs_attention", eng:status(a).status)
    assert.are.equal("succeeded", H.step(eng:status(a), "charge").status)
    local b = R.start(eng, 12)
    assert.is_nil(H.step(eng:status(b), "charge").reused)
    eng:signal(b, "ok", true)
    eng:advance(1)
    assert.are.equal("succeeded", eng:status(b).status)
    broken = false
    eng:dlq_retry(a, { who = "ops" })
    eng:run()
    assert.are.same({ a }, log.refunds)
    assert.are.equal(2, log.charges)   -- b's own charge stands
  end)

  -- A child run is undone with its parent: while the parent goes back and has not reached it,
  -- the child is still `succeeded`, and its key is not offered.
  it("is not taken from a child whose parent is going back", function()
    local eng = H.new_engine()
    local log = { charges = 0, refunds = {} }
    eng:register { name = "kid", steps = {
      { name = "charge", idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
        execute = function() log.charges = log.charges + 1; return "c-" .. log.charges end,
        compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end } } }
    eng:register { name = "parent", steps = {
      { name = "k", child = "kid" },
      { name = "tidy", execute = function() return 1 end,
        compensate = function() mend.sleep(5) end },
      { name = "boom", execute = function() error(mend.fatal("no")) end } } }
    eng:register(R.order_def(log))
    local p = eng:start("parent", { order = 13 })
    eng:advance(1)
    assert.are.equal("compensating", eng:status(p).status)   -- undoing tidy, 5 s
    local b = R.start(eng, 13)
    assert.is_nil(H.step(eng:status(b), "charge").reused)
    eng:signal(b, "ok", true)
    eng:run()
    assert.are.equal(1, #log.refunds)   -- the child's charge, undone with its parent
    assert.are.equal("succeeded", eng:status(b).status)
    assert.are.equal(2, log.charges)
  end)

  -- Passed by once, however often the worker restarts in the backward walk.
  -- def(name, fail) is a workflow reusing a step of an earlier run: its `ok` form (given
  -- ok_input) runs to its end, then its failing form (fail_input) is driven until its way back
  -- has begun, and the engine is closed there and reopened (recovered and run to the end): the
  -- two runs' ids and the reopened engine.
  local function way_back_after_restart(def, ok_input, fail_input)
    local eng, db = H.new_engine()
    eng:register(def("ok", false))
    eng:register(def("fail", true))
    local a = eng:start("ok", ok_input)
    eng:run()
    local b = eng:start("fail", fail_input)
    eng:advance(1)
    eng:advance(1)
    assert.are.equal("compensating", eng:status(b).status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def("ok", false))
    eng2:register(def("fail", true))
    eng2:recover()
    eng2:run()
    assert.are.equal("compensated", eng2:status(b).status)
    return a, b, eng2
  end

  it("is passed by once in a map's way back begun again after a restart", function()
    local log = { refunds = {} }
    local function def(name, fail)
      return { name = name, steps = {
        { name = "m", max_concurrency = 1, map = function(ctx) return ctx.input.items end, step = {
          idempotency_key = function(ctx) return "it-" .. ctx.input.items[tonumber(
            ctx.step:match("/(%d+)$"))] end,
          execute = function(_, item) return item end,
          compensate = function(ctx, r)
            mend.sleep(5)
            log.refunds[#log.refunds + 1] = ctx.run_id .. ":" .. r
          end } },
        { name = "end", execute = function() if fail then error(mend.fatal("no")) end end } } }
    end
    -- the failing run executes item 1, then reuses 2
    local a, b, eng2 = way_back_after_restart(def, { items = { 2 } }, { items = { 1, 2 } })
    assert.are.same({ b .. ":1" }, log.refunds)
    assert.are.equal(a, H.step(eng2:status(b), "m/2").reused_from)
    assert.are.equal(1, #skips(eng2, b, "m/2"))
  end)

  it("is passed by once in a group's way back begun again after a restart", function()
    local log = { refunds = {} }
    local function def(name, fail)
      return { name = name, steps = {
        -- one at a time: pay is reused after note executed, so passed by first on the way
        -- back, before note's compensation (5 s) that the restart comes in
        { name = "g", max_concurrency = 1, parallel = {
          { name = "note", execute = function() return "n" end,
            compensate = function(ctx)
              mend.sleep(5)
              log.refunds[#log.refunds + 1] = ctx.run_id .. " note"
            end },
          { name = "pay", idempotency_key = function(ctx) return "pay-" .. ctx.input.o end,
            execute = function() return "p" end,
            compensate = function(ctx)
              log.refunds[#log.refunds + 1] = ctx.run_id .. " pay"
            end } } },
        { name = "end", execute = function() if fail then error(mend.fatal("no")) end end } } }
    end
    local a, b, eng2 = way_back_after_restart(def, { o = 1 }, { o = 1 })
    assert.are.same({ b .. " note" }, log.refunds)
    assert.are.equal(a, H.step(eng2:status(b), "g/pay").reused_from)
    assert.are.equal(1, #skips(eng2, b, "g/pay"))
  end)
end)
