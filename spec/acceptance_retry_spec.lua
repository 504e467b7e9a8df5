-- Acceptance, from outside: what SPEC sections 3 and 4 promise of retries, read through the Lua
-- API only (status, history, alerts) on SQLite files and the virtual clock.
local mend = require "mend"
local H = require "spec.helper"

-- Runs a one-step workflow whose step raises `make(n)` on call n while it returns an error.
local function run(step_fields, make, opts, extra)
  local eng, alerts, path = H.engine_with_alerts(opts)
  local box = { calls = 0, keys = {}, attempts = {} }
  step_fields.execute = function(ctx)
    box.calls = box.calls + 1
    box.keys[#box.keys + 1] = ctx.idempotency_key
    box.attempts[#box.attempts + 1] = ctx.attempt
    local e = make(box.calls)
    if e then error(e) end
    return box.calls
  end
  eng:register(H.one_step("acc", step_fields, extra))
  local t0 = eng:now()
  local id = eng:start("acc", {})
  eng:run()
  return eng, id, box, t0, alerts, path
end

local function always(e) return function() return e end end
local function busy() return mend.retryable("busy") end

describe("acceptance: retries #sqlite", function()
  after_each(H.cleanup)

  it("numbers attempts from 1, keeps the key on each, and counts max_attempts", function()
    local eng, id, box = run({ retry = { max_attempts = 3, jitter = 0 } }, always(busy()))
    assert.are.same({ 1, 2, 3 }, box.attempts)
    assert.are.same({ id .. "/work", id .. "/work", id .. "/work" }, box.keys)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("attempts_exhausted", st.reason)
    assert.are.equal(3, H.step(st, "work").attempts)
  end)

  it("keeps proportional jitter within +-jitter*delay and below max_delay", function()
    local eng, id = run({ retry = { max_attempts = 7, initial = 10, multiplier = 2,
                                    max_delay = 60, jitter = 0.5 } }, always(busy()))
    local d = H.retry_delays(eng, id, "work")
    assert.are.equal(6, #d)
    local base = { 10, 20, 40, 60, 60, 60 }
    for i, x in ipairs(d) do
      assert.is_true(x >= base[i] * 0.5 - 1e-9 and x <= math.min(60, base[i] * 1.5) + 1e-9,
        ("delay %d = %s for base %s"):format(i, x, base[i]))
    end
  end)

  it("keeps full jitter in [0, delay] and decorrelated in [0, max_delay]", function()
    for _, mode in ipairs { "full", "decorrelated" } do
      local eng, id = run({ retry = { max_attempts = 9, initial = 2, multiplier = 3,
                                      max_delay = 30, jitter = 1, jitter_mode = mode } },
                          always(busy()))
      local d = H.retry_delays(eng, id, "work")
      assert.are.equal(8, #d)
      for i, x in ipairs(d) do
        local cap = mode == "full" and math.min(30, 2 * 3 ^ (i - 1)) or 30
        assert.is_true(x >= 0 and x <= cap + 1e-9, mode .. (" delay %d = %s"):format(i, x))
      end
    end
  end)

  it("gives the same schedule for the same seed", function()
    local f = { retry = { max_attempts = 6, jitter = 0.3 } }
    local e1, i1 = run({ retry = f.retry }, always(busy()), { seed = 77 })
    local e2, i2 = run({ retry = f.retry }, always(busy()), { seed = 77 })
    assert.are.same(H.retry_delays(e1, i1, "work"), H.retry_delays(e2, i2, "work"))
  end)

  it("lets retry_after win over backoff and over max_delay, clamped by max_retry_after",
    function()
      local eng, id, _, t0 = run({ retry = { max_attempts = 4, jitter = 0, max_delay = 60,
                                             max_retry_after = 200 } },
        function(n)
          if n == 1 then return mend.retryable("slow", { retry_after = 7 }) end
          if n == 2 then return mend.retryable("slower", { retry_after = 120 }) end
          if n == 3 then return mend.retryable("much", { retry_after = 5000 }) end
        end)
      assert.are.same({ 7, 120, 200 }, H.retry_delays(eng, id, "work"))
      assert.near(327, eng:now() - t0, 1e-3)
      assert.are.equal("succeeded", eng:status(id).status)
    end)

  it("clamps retry_after by the default max_retry_after of 900 s", function()
    local eng, id = run({ retry = { max_attempts = 2, jitter = 0 } },
      function(n) if n == 1 then return mend.retryable("x", { retry_after = 86400 }) end end)
    assert.are.same({ 900 }, H.retry_delays(eng, id, "work"))
  end)

  it("does not retry a fatal error, nor a plain Lua error, nor a runtime error", function()
    for i, e in ipairs { mend.fatal("declined"), "plain string", false } do
      local eng, id, box = run({ retry = { max_attempts = 5 } }, function()
        if e == false then local t = nil; return t.x end
        return e
      end)
      assert.are.equal(1, box.calls)
      local st = eng:status(id)
      assert.are.equal("failed", st.status)   -- nothing to compensate
      assert.are.equal(i == 1 and "fatal" or "error", st.reason)
    end
  end)

  it("keeps an error's kind when it is caught and raised again", function()
    local eng, id, box = run({ retry = { max_attempts = 3, jitter = 0 } }, function(n)
      if n < 3 then
        local ok, e = pcall(error, mend.retryable("inner"))
        assert(not ok)
        return e
      end
    end)
    assert.are.equal(3, box.calls)
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  it("times an attempt out with a retryable timeout error", function()
    local eng, id, box = run({ timeout = 2, retry = { max_attempts = 2, jitter = 0 } },
      function(n) if n == 1 then mend.sleep(10) end end)
    assert.are.equal(2, box.calls)
    local w = H.events(eng, id, { event = "step", step = "work", to = "retry_wait" })
    assert.are.equal(1, #w)
    assert.matches("timeout", w[1].error)
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  it("flags attention after attention_after failures and goes on retrying", function()
    local eng, id, box, _, alerts = run(
      { retry = { max_attempts = 5, jitter = 0, attention_after = 2 } },
      function(n) if n < 5 then return busy() end end)
    assert.are.equal(5, box.calls)
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.truthy(st.attention)
    assert.are.equal(1, #H.alerts_of(alerts, "attention"))
  end)

  it("records each failed attempt with its attempt, error and delay in the history", function()
    local eng, id = run({ retry = { max_attempts = 3, jitter = 0, initial = 0.5 } },
      function(n) if n < 3 then return mend.retryable("e" .. n) end end)
    local w = H.events(eng, id, { event = "step", step = "work", to = "retry_wait" })
    assert.are.same({ 1, 2 }, { w[1].attempt, w[2].attempt })
    assert.are.same({ 0.5, 1 }, { w[1].delay, w[2].delay })
    assert.matches("e1", w[1].error)
    assert.matches("e2", w[2].error)
    local h = eng:history(id)
    for i = 2, #h do
      assert.is_true(h[i].seq > h[i - 1].seq and h[i].at >= h[i - 1].at)
    end
  end)
end)
