-- Acceptance, from outside: the finer points of SPEC sections 4, 5 and 7 (half-open probes,
-- compensation retry rules, repairs of severity 3) through the Lua API, virtual clock.
local mend = require "mend"
local H = require "spec.helper"

describe("acceptance: finer points #sqlite", function()
  after_each(H.cleanup)

  it("admits one half-open probe at a time", function()
    local eng = H.new_engine()
    local box = { down = true, inside = 0, most = 0, calls = 0 }
    -- half-open for the 5 runs' probes: it closes after 10 successes
    eng:register({ name = "w", steps = { { name = "call",
      breaker = { key = "dep", success_threshold = 10 },
      retry = { max_attempts = 50, initial = 1, max_delay = 1, jitter = 0 },
      execute = function()
        box.calls = box.calls + 1
        box.inside = box.inside + 1
        if box.inside > box.most then box.most = box.inside end
        mend.sleep(0.5)
        box.inside = box.inside - 1
        if box.down then error(mend.retryable("down")) end
      end } } })
    for _ = 1, 5 do eng:start("w", {}) end
    eng:advance(2)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    box.down = false
    box.most = 0
    local before = box.calls
    eng:advance(35)
    assert.are.equal(1, box.most)
    assert.is_true(box.calls > before)
    eng:run()
    for _, r in ipairs(eng:runs{ workflow = "w" }) do
      assert.are.equal("succeeded", r.status)
    end
  end)

  it("dead-letters at once a compensation failing with a plain error", function()
    local eng = H.new_engine()
    local undos = 0
    eng:register({ name = "p", steps = {
      { name = "a", execute = function() return 1 end,
        compensate = function() undos = undos + 1; error("bug in refund") end },
      { name = "b", execute = function() error(mend.fatal("no")) end } } })
    local id = eng:start("p", {})
    eng:run()
    assert.are.equal(1, undos)
    assert.are.equal("compensation_failed", eng:status(id).reason)
  end)

  it("honours a compensation's retry_after, clamped by max_retry_after", function()
    local eng = H.new_engine()
    local n = 0
    eng:register({ name = "p", compensate_retry = { max_attempts = 3, max_retry_after = 50,
      jitter = 0 },
      steps = {
      { name = "a", execute = function() return 1 end,
        compensate = function()
          n = n + 1
          if n == 1 then error(mend.retryable("later", { retry_after = 20 })) end
          if n == 2 then error(mend.retryable("much later", { retry_after = 500 })) end
        end },
      { name = "b", execute = function() error(mend.fatal("no")) end } } })
    local id = eng:start("p", {})
    eng:run()
    local d = {}
    for _, h in ipairs(H.events(eng, id,
      { event = "compensate_failed" })) do d[#d + 1] = h.delay end
    assert.are.same({ 20, 50 }, d)
    assert.are.equal("compensated", eng:status(id).status)
  end)

  -- Compensation has its own retry policy (SPEC 7): its decorrelated backoff starts from its
  -- own `initial`, not from the last delay the way forward waited.
  it("starts a compensation's decorrelated backoff afresh, whatever the way forward waited",
    function()
      for seed = 1, 5 do
        local eng = H.new_engine({ seed = seed })
        eng:register { name = "dc", steps = {
          { name = "a", retry = { max_attempts = 3, initial = 200, max_delay = 300, jitter = 0 },
            compensate_retry = { max_attempts = 2, initial = 1, max_delay = 1000,
                                 jitter_mode = "decorrelated" },
            execute = function(ctx)
              if ctx.attempt < 3 then error(mend.retryable("x")) end
              return 1
            end,
            compensate = function(ctx) if ctx.attempt == 1 then error(mend.retryable("c")) end end
              },
          { name = "b", execute = function() error(mend.fatal("f")) end } } }
        local id = eng:start("dc", {})
        eng:run()
        assert.are.same({ 200, 300 }, H.retry_delays(eng, id, "a"))
        local cf = H.events(eng, id, { event = "compensate_failed" })
        assert.are.equal(1, #cf)
        assert.is_true(cf[1].delay >= 1 and cf[1].delay <= 3,
          ("seed %d: first compensation delay %s"):format(seed, cf[1].delay))
        assert.are.equal("compensated", eng:status(id).status)
        H.close(eng)
      end
    end)

  it("dlq retry of a severity-3 dead letter runs the failed step again, fresh attempts", function()
    local eng = H.new_engine()
    local calls, fixed = 0, false
    eng:register({ name = "s3", steps = {
      { name = "a", execute = function() return 1 end },
      { name = "b", retry = { max_attempts = 2, jitter = 0 }, execute = function()
          calls = calls + 1
          if not fixed then error(mend.compensable("unsure", { severity = 3 })) end
          return "fine"
        end } } })
    local id = eng:start("s3", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    fixed = true
    eng:dlq_retry(id, { who = "ana" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(2, calls)
    assert.are.equal("fine", H.step(st, "b").result)
  end)

  it("does not count a fatal error against the breaker, nor reset its count", function()
    local eng = H.new_engine()
    local mode = "down"
    eng:register({ name = "w", steps = { { name = "call", breaker = "dep",
      retry = { max_attempts = 1 },
      execute = function()
        if mode == "down" then error(mend.retryable("down")) end
        error(mend.fatal("bad"))
      end } } })
    for _ = 1, 4 do eng:start("w", {}) end
    eng:run()
    assert.are.equal(4, H.breaker(eng, "dep").failures)
    mode = "fatal"
    eng:start("w", {})
    eng:run()
    assert.are.equal(4, H.breaker(eng, "dep").failures)
    assert.are.equal("closed", H.breaker(eng, "dep").state)
    mode = "down"
    eng:start("w", {})
    eng:run()
    assert.are.equal("open", H.breaker(eng, "dep").state)
  end)

  it("keeps the history's times and delays in the audit view for plain SQL", function()
    local eng, path = H.new_engine()
    eng:register(H.one_step("f", { retry = { max_attempts = 2, jitter = 0, initial = 3 },
      execute = function(ctx) if ctx.attempt == 1 then error(mend.retryable("busy")) end end }))
    local id = eng:start("f", {})
    eng:run()
    local rows = H.sql(path, "SELECT count(*) FROM history_named WHERE run_id = '" .. id .. "'")
    assert.are.equal(#eng:history(id), tonumber(rows[1]))
  end)
end)
