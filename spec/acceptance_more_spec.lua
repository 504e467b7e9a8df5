-- Acceptance, from outside: more of SPEC sections 3 to 6, 10 and 11 through the Lua API on
-- SQLite files (virtual clock unless time must be real): error fields kept when re-raised,
-- policy merges, recorded custom keys, breakers' first attempts, consecutive counts and caps,
-- child cancels, map caps, tokens, late events, numbers from the store, limits.
local mend = require "mend"
local H = require "spec.helper"

local function delays(eng, id)
  return H.retry_delays(eng, id, "s")
end

describe("acceptance: more #sqlite", function()
  after_each(H.cleanup)

  it("keeps retry_after when the error is caught and raised again, also through a coroutine",
    function()
      local eng = H.new_engine()
      eng:register { name = "rr", retry = { jitter = 0, max_attempts = 3 }, steps = { { name = "s",
        execute = function(ctx)
          if ctx.attempt == 1 then
            local _, e = pcall(function() error(mend.retryable("x", { retry_after = 7 })) end)
            error(e)
          end
          if ctx.attempt == 2 then
            local _, e = pcall(coroutine.wrap(function()
              error(mend.retryable("y", { retry_after = 4 })) end))
            error(e, 2)
          end
        end } } }
      local id = eng:start("rr", {})
      eng:run()
      assert.are.equal("succeeded", eng:status(id).status)
      assert.are.same({ 7, 4 }, delays(eng, id))
    end)

  it("merges a step's retry and compensate_retry fields over the workflow's", function()
    local eng = H.new_engine()
    eng:register { name = "mg", retry = { max_attempts = 2, initial = 5, jitter = 0 },
      steps = { { name = "s", retry = { initial = 1 },
                  execute = function() error(mend.retryable("z")) end } } }
    local id = eng:start("mg", {})
    eng:run()
    assert.are.equal(2, H.step(eng:status(id), "s").attempts)
    assert.are.same({ 1 }, delays(eng, id))
    local n = 0
    eng:register { name = "cm", compensate_retry = { max_attempts = 4, initial = 3, jitter = 0 },
      steps = { { name = "a", compensate_retry = { initial = 0.5 },
        execute = function() return 1 end,
                  compensate = function() n = n + 1; error(mend.retryable("d")) end },
                { name = "b", execute = function() error(mend.fatal("f")) end } } }
    local id2 = eng:start("cm", {})
    eng:run()
    assert.are.equal(4, n)
    local d = {}
    for _, h in ipairs(H.events(eng, id2,
      { event = "compensate_failed" })) do d[#d + 1] = h.delay end
    assert.are.same({ 0.5, 1, 2 }, d)
  end)

  it("asks a custom idempotency_key once: the same key on every attempt, restart and undo",
    function()
      local eng, path = H.new_engine()
      local n, keys = 0, {}
      local def = { name = "ik", retry = { jitter = 0, max_attempts = 4 }, steps = {
        { name = "s", idempotency_key = function() n = n + 1; return "k-" .. n end,
          execute = function(ctx)
            keys[#keys + 1] = ctx.idempotency_key
            if ctx.attempt < 3 then error(mend.retryable("x")) end
            mend.sleep(5)
          end,
          compensate = function(ctx) keys[#keys + 1] = ctx.idempotency_key end },
        { name = "t", execute = function() error(mend.fatal("f")) end } } }
      eng:register(def)
      local id = eng:start("ik", {})
      eng:advance(4)
      H.close(eng)
      local eng2 = H.reopen(path)
      eng2:register(def)
      eng2:recover()
      eng2:run()
      assert.are.same({ "k-1", "k-1", "k-1", "k-1", "k-1" }, keys)
      assert.are.equal(1, n)
      assert.are.equal("compensated", eng2:status(id).status)
    end)

  it("does not execute a first attempt through an open breaker, nor count it", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register { name = "op", steps = { { name = "s", breaker = "dep2",
      execute = function() calls = calls + 1 end } } }
    eng:breaker("dep2", "open", { seconds = 100, who = "t" })
    local id = eng:start("op", {})
    eng:advance(5)
    local s = H.step(eng:status(id), "s")
    assert.are.same({ "breaker_open", 0, 0 }, { s.status, s.attempts, calls })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(1, H.step(eng:status(id), "s").attempts)
  end)

  it("counts consecutive failures only, timeouts among them", function()
    local eng = H.new_engine()
    local mode = "down"
    eng:register { name = "w", steps = { { name = "call", breaker = "dep",
      retry = { max_attempts = 1 },
      execute = function() if mode == "down" then error(mend.retryable("x")) end end } } }
    for _ = 1, 4 do eng:start("w", {}) end
    eng:run()
    mode = "up"
    eng:start("w", {})
    eng:run()
    mode = "down"
    for _ = 1, 4 do eng:start("w", {}) end
    eng:run()
    assert.are.equal("closed", H.breaker(eng, "dep").state)
    eng:register { name = "t", steps = { { name = "slow", timeout = 1, retry = { max_attempts = 1 },
      execute = function() mend.sleep(3) end } } }
    for _ = 1, 5 do eng:start("t", {}) end
    eng:run()
    assert.are.equal("open", H.breaker(eng, "slow").state)
  end)

  it("caps attempts at once per breaker and per engine", function()
    local eng = H.new_engine({ max_concurrency = 3 })
    local inside, most = 0, 0
    local function body()
      inside = inside + 1
      if inside > most then most = inside end
      mend.sleep(1)
      inside = inside - 1
    end
    eng:register { name = "c", breaker = { max_concurrency = 2 }, steps = { { name = "call",
      execute = body } } }
    eng:register { name = "d", steps = { { name = "other", execute = body } } }
    for _ = 1, 6 do eng:start("c", {}) end
    eng:run()
    assert.are.equal(2, most)
    most = 0
    for _ = 1, 6 do eng:start("d", {}) end
    eng:run()
    assert.are.equal(3, most)
  end)

  it("cancels the child of a cancelled parent, child's undo before the parent's", function()
    local eng = H.new_engine()
    local log = {}
    eng:register { name = "kid", steps = {
      { name = "k1", execute = function() return 1 end,
        compensate = function() log[#log + 1] = "undo k1" end },
      { name = "kw", wait_for = "never" } } }
    eng:register { name = "par", steps = {
      { name = "p1", execute = function() return 1 end,
        compensate = function() log[#log + 1] = "undo p1" end },
      { name = "c", child = "kid" } } }
    local pid = eng:start("par", {})
    eng:advance(1)
    assert.are.equal("cancelled", eng:cancel(pid, { who = "t" }))
    eng:run()
    local kid = eng:runs{ workflow = "kid" }[1]
    assert.are.same({ "compensated", "cancelled" }, { eng:status(pid).status,
      eng:status(pid).reason })
    assert.are.equal("compensated", eng:status(kid.id).status)
    assert.are.same({ "undo k1", "undo p1" }, log)
  end)

  it("runs a map's items at most max_concurrency at once, each with its own key", function()
    local eng = H.new_engine()
    local inside, most, keys = 0, 0, {}
    eng:register { name = "mp", steps = { { name = "m", max_concurrency = 3,
      map = function() local t = {} for i = 1, 10 do t[i] = i * 10 end return t end,
      step = { execute = function(ctx, item)
        keys[#keys + 1] = ctx.idempotency_key
        inside = inside + 1
        if inside > most then most = inside end
        mend.sleep(1)
        inside = inside - 1
        return item
      end } } } }
    local id = eng:start("mp", {})
    eng:run()
    assert.are.equal(3, most)
    assert.are.equal(10, #keys)
    assert.truthy(H.index_of(keys, id .. "/m/10"))
    assert.are.same({ 10, 20, 30, 40, 50, 60, 70, 80, 90, 100 }, H.step(eng:status(id), "m").result)
  end)

  it("makes a token single use and of one attempt; a new attempt has a new one", function()
    local eng = H.new_engine()
    local toks = {}
    eng:register { name = "ap", steps = { { name = "approve", wait = "token", timeout = 100,
      retry = { max_attempts = 3, jitter = 0 },
      execute = function(ctx) toks[#toks + 1] = ctx:token();
        assert(ctx:token() == toks[#toks]) end } } }
    local id = eng:start("ap", {})
    eng:advance(1)
    assert.matches("^mtk_%x+$", toks[1])
    assert.are.equal(32, #toks[1] - 4)
    eng:fail(toks[1], { kind = "retryable", message = "later" })
    eng:advance(2)
    assert.are.equal(2, #toks)
    assert.are_not.equal(toks[1], toks[2])
    assert.has_error(function() eng:complete(toks[1], {}) end)
    assert.are.equal(id, eng:complete(toks[2], { by = "al" }))
    assert.has_error(function() eng:complete(toks[2], {}) end)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ by = "al" }, H.step(st, "approve").result)
  end)

  it("gives a late event (sent past a deadline no worker saw) to the next attempt", function()
    local eng, path = H.new_engine()
    local def = { name = "q", steps = { { name = "w", wait_for = "go", timeout = 1,
      retry = { max_attempts = 2, initial = 0.1, jitter = 0 } } } }
    eng:register(def)
    local id = eng:start("q", {})
    eng:advance(0.1)
    H.close(eng)
    os.execute("sleep 1.3")
    local sender = mend.engine { db = path }
    assert.are.equal("sent", (sender:signal(id, "go", { late = true })))
    sender:close()
    local eng2 = H.reopen(path)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(2, H.step(st, "w").attempts)
    assert.are.same({ late = true }, H.step(st, "w").result)
    assert.matches("timeout", H.events(eng2, id, { step = "w", to = "retry_wait" })[1].error)
  end)

  it("gives integers back as integers after a restart", function()
    local eng, path = H.new_engine()
    local seen
    local def = { name = "nm", steps = {
      { name = "a", execute = function() return { id = 3, f = 2.5 } end },
      { name = "b", sleep = 10, execute = function(ctx)
          seen = "order-" .. ctx.results.a.id .. "/" .. ctx.input.n .. "/" .. ctx.results.a.f end
            } } }
    eng:register(def)
    eng:start("nm", { n = 7 })
    eng:advance(1)
    H.close(eng)
    local eng2 = H.reopen(path)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.equal("order-3/7/2.5", seen)
  end)

  it("interrupts a CPU-bound step at its timeout (real clock), a retryable timeout", function()
    local eng = H.new_engine({ clock = "real" })
    eng:register { name = "cpu", steps = { { name = "s", timeout = 0.2,
      retry = { max_attempts = 2, initial = 0.05, jitter = 0 },
        execute = function() while true do end end } } }
    local id = eng:start("cpu", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal(2, H.step(st, "s").attempts)
    assert.are.equal("attempts_exhausted", st.reason)
    assert.matches("timeout", H.step(st, "s").error)
  end)

  it("dead-letters a run over its instruction budget as workflow_error, undoing nothing", function()
    local eng = H.new_engine({ instruction_budget = 100000 })
    local undone = false
    eng:register { name = "ib", steps = {
      { name = "a", execute = function() return 1 end, compensate = function() undone = true end },
      { name = "s", execute = function() while true do end end } } }
    local id = eng:start("ib", {})
    eng:run()
    local st = eng:status(id)
    assert.are.same({ "needs_attention", "workflow_error" }, { st.status, st.reason })
    assert.is_false(undone)
    assert.are.equal("s", H.dlq_entry(eng, id).step)
  end)

  it("refuses a dlq retry of a run compensated after its attempts ran out", function()
    local eng = H.new_engine()
    eng:register { name = "ex", retry = { max_attempts = 2, jitter = 0 }, steps = {
      { name = "a", execute = function() return 1 end, compensate = function() end },
      { name = "s", execute = function() error(mend.retryable("x")) end } } }
    local id = eng:start("ex", {})
    eng:run()
    assert.has_error(function() eng:dlq_retry(id, { who = "t" }) end)
    assert.are.equal("needs_attention", eng:status(id).status)
  end)

  it("keeps every jitter mode and strategy within [0, max_delay]", function()
    for _, mode in ipairs { "proportional", "full", "decorrelated" } do
      for _, strategy in ipairs { "exponential", "linear", "fixed" } do
        for _, cfg in ipairs { { initial = 10, max_delay = 3, jitter = 0.9 },
                               { initial = 0.5, max_delay = 7, jitter = 1, multiplier = 3 },
                               { initial = 2, max_delay = 2, jitter = 1 } } do
          local eng = H.new_engine({ seed = 5 })
          local r = { max_attempts = 8, strategy = strategy, jitter_mode = mode }
          for k, v in pairs(cfg) do r[k] = v end
          eng:register { name = "j", retry = r, steps = { { name = "s",
            execute = function() error(mend.retryable("x")) end } } }
          local id = eng:start("j", {})
          eng:run()
          for _, d in ipairs(delays(eng, id)) do
            assert.is_true(d >= 0 and d <= cfg.max_delay + 1e-9, ("%s %s %s"):format(mode,
              strategy, d))
          end
          H.close(eng)
        end
      end
    end
  end)
end)
