-- Idempotency: one run per run key, stable step keys, and a step that succeeded is not
-- executed again.
local mend = require "mend"
local H = require "spec.helper"

describe("a run key", function()
  after_each(H.cleanup)

  local function counting_workflow(counter)
    return H.one_step("keyed", { execute = function(_, input)
      counter.n = counter.n + 1
      return input.order
    end })
  end

  it("started twice gives one run: the same id, existed = true, one row", function()
    local eng, path = H.new_engine()
    local counter = { n = 0 }
    eng:register(counting_workflow(counter))
    local id1, existed1 = eng:start("keyed", { order = 17 }, { key = "order-17" })
    local id2, existed2 = eng:start("keyed", { order = 17 }, { key = "order-17" })
    assert.are.equal(id1, id2)
    assert.is_false(existed1)
    assert.is_true(existed2)
    eng:run()
    assert.are.equal(1, counter.n)
    local st = eng:status(id1)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("order-17", st.key)

    -- after it finished, the key still names that run and nothing runs again
    local id3, existed3 = eng:start("keyed", { order = 17 }, { key = "order-17" })
    assert.are.equal(id1, id3)
    assert.is_true(existed3)
    eng:run()
    assert.are.equal(1, counter.n)

    assert.are.same({ "1" }, H.sql(path, "SELECT count(*) FROM runs"))
    assert.are.same({ "1" }, H.sql(path, "SELECT count(*) FROM runs WHERE run_key = 'order-17'"))
  end)

  it("is remembered by the database across a restart", function()
    local eng, path = H.new_engine()
    local counter = { n = 0 }
    eng:register(counting_workflow(counter))
    local id1 = eng:start("keyed", { order = 3 }, { key = "order-3" })
    eng:run()
    H.close(eng)

    local eng2 = H.reopen(path)
    eng2:register(counting_workflow(counter))
    local id2, existed = eng2:start("keyed", { order = 3 }, { key = "order-3" })
    assert.are.equal(id1, id2)
    assert.is_true(existed)
    eng2:run()
    assert.are.equal(1, counter.n)
  end)

  it("does not join runs started without a key or with another key", function()
    local eng = H.new_engine()
    local counter = { n = 0 }
    eng:register(counting_workflow(counter))
    local a = eng:start("keyed", { order = 1 }, { key = "order-1" })
    local b = eng:start("keyed", { order = 2 }, { key = "order-2" })
    local c = eng:start("keyed", { order = 3 })
    local d = eng:start("keyed", { order = 3 })
    eng:run()
    assert.are.equal(4, counter.n)
    assert.are_not.equal(a, b)
    assert.are_not.equal(c, d)
  end)
end)

describe("a step's idempotency key", function()
  after_each(H.cleanup)

  it("is run_id/step by default and stays the same across attempts", function()
    local eng = H.new_engine()
    local keys = {}
    eng:register(H.one_step("stable", {
      name = "charge",
      retry = { max_attempts = 3, initial = 1, jitter = 0 },
      execute = function(ctx)
        keys[#keys + 1] = ctx.idempotency_key
        if #keys < 3 then error(mend.retryable("busy")) end
        return "ok"
      end,
    }))
    local id = eng:start("stable", {})
    eng:run()
    assert.are.same({ id .. "/charge", id .. "/charge", id .. "/charge" }, keys)
    assert.are.equal(id .. "/charge", H.step(eng:status(id), "charge").idempotency_key)
  end)

  it("is run_id/step whole for a step with a long name, and kept after a restart", function()
    local name = "charge_" .. string.rep("x", 400)
    local eng, db = H.new_engine()
    local keys = {}
    local def = H.one_step("long", {
      name = name,
      retry = { max_attempts = 3, initial = 1, jitter = 0 },
      execute = function(ctx)
        keys[#keys + 1] = ctx.idempotency_key
        if #keys == 1 then mend.sleep(5) end
        return "ok"
      end,
    })
    eng:register(def)
    local id = eng:start("long", {})
    eng:advance(1)
    H.close(eng)
    local again = H.reopen(db)
    again:register(def)
    again:recover()
    again:run()
    assert.are.same({ id .. "/" .. name, id .. "/" .. name }, keys)
    assert.are.equal(id .. "/" .. name, H.step(again:status(id), name).idempotency_key)
  end)

  it("is given to compensate too", function()
    local eng = H.new_engine()
    local exec_key, comp_key
    eng:register {
      name = "undo",
      steps = {
        { name = "charge",
          idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
          execute = function(ctx) exec_key = ctx.idempotency_key; return "c" end,
          compensate = function(ctx) comp_key = ctx.idempotency_key end },
        { name = "ship", execute = function() error(mend.fatal("no address")) end },
      },
    }
    local id = eng:start("undo", { order = 9 })
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.equal("charge-9", exec_key)
    assert.are.equal("charge-9", comp_key)
  end)
end)

describe("a succeeded step", function()
  after_each(H.cleanup)

  it("is not executed again when a later step is retried", function()
    local eng = H.new_engine()
    local first, second = 0, 0
    eng:register {
      name = "twice",
      retry = { max_attempts = 3, initial = 1, jitter = 0 },
      steps = {
        { name = "first", execute = function() first = first + 1; return "one" end },
        { name = "second", execute = function(ctx)
            second = second + 1
            if second < 3 then error(mend.retryable("busy")) end
            return ctx.results.first
          end },
      },
    }
    local id = eng:start("twice", {})
    eng:run()
    assert.are.equal(1, first)
    assert.are.equal(3, second)
    assert.are.equal("one", H.step(eng:status(id), "second").result)
  end)

  it("with a custom key that succeeded in an earlier run is not executed: its recorded "
    .. "result is returned", function()
    local eng = H.new_engine()
    local charges, seen = 0, {}
    eng:register {
      name = "order",
      steps = {
        { name = "charge",
          idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
          execute = function(ctx)
            charges = charges + 1
            return { charge = "c-" .. charges, key = ctx.idempotency_key }
          end },
        { name = "receipt", execute = function(ctx)
            seen[#seen + 1] = ctx.results.charge
            return ctx.results.charge.charge
          end },
      },
    }
    local id1 = eng:start("order", { order = 17 })
    eng:run()
    local id2 = eng:start("order", { order = 17 })
    eng:run()
    assert.are_not.equal(id1, id2)
    assert.are.equal(1, charges)
    local st2 = eng:status(id2)
    assert.are.equal("succeeded", st2.status)
    local charge2 = H.step(st2, "charge")
    assert.are.equal("succeeded", charge2.status)
    assert.are.same({ charge = "c-1", key = "charge-17" }, charge2.result)
    assert.are.equal("charge-17", charge2.idempotency_key)
    assert.are.same({ { charge = "c-1", key = "charge-17" }, { charge = "c-1", key = "charge-17" } },
      seen)
    assert.are.equal("c-1", H.step(st2, "receipt").result)

    -- another order has another key and is charged
    local id3 = eng:start("order", { order = 18 })
    eng:run()
    assert.are.equal(2, charges)
    assert.are.same({ charge = "c-2", key = "charge-18" }, H.step(eng:status(id3), "charge").result)
  end)

  it("with a custom key whose earlier attempt failed is executed", function()
    local eng = H.new_engine()
    local charges = 0
    eng:register(H.one_step("retrykey", {
      name = "charge",
      retry = { max_attempts = 1 },
      idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
      execute = function(ctx)
        charges = charges + 1
        if ctx.input.fail then error(mend.fatal("declined")) end
        return "paid"
      end,
    }))
    local id1 = eng:start("retrykey", { order = 5, fail = true })
    eng:run()
    assert.are.equal("failed", eng:status(id1).status)
    local id2 = eng:start("retrykey", { order = 5, fail = false })
    eng:run()
    assert.are.equal(2, charges)
    assert.are.equal("succeeded", eng:status(id2).status)
  end)
end)
