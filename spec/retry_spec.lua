-- Retries: which failures are retried, how many times, and after exactly which delays.
local mend = require "mend"
local H = require "spec.helper"

-- A one-step workflow whose step fails with `fail(n)` on call n while it returns a value, then
-- succeeds. Returns the engine, the run id, the call counter box and the start time.
local function run_failing(retry, fail, opts)
  local eng = H.new_engine(opts)
  local box = { calls = 0, attempts = {} }
  eng:register(H.one_step("flaky", {
    retry = retry,
    execute = function(ctx)
      box.calls = box.calls + 1
      box.attempts[#box.attempts + 1] = ctx.attempt
      local e = fail(box.calls)
      if e then error(e) end
      return "ok after " .. box.calls
    end,
  }))
  local t0 = eng:now()
  local id = eng:start("flaky", {})
  eng:run()
  return eng, id, box, t0
end

local function fails_times(k, make)
  return function(n) if n <= k then return make() end end
end

local function busy() return mend.retryable("busy") end

describe("a retry policy", function()
  after_each(H.cleanup)

  it("retries a retryable failure and succeeds on the third attempt after 1 s then 2 s",
    function()
      local eng, id, box, t0 = run_failing(
        { max_attempts = 5, initial = 1, multiplier = 2, jitter = 0 }, fails_times(2, busy))
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(3, box.calls)
      assert.are.same({ 1, 2, 3 }, box.attempts)
      local s = H.step(st, "work")
      assert.are.equal(3, s.attempts)
      assert.are.equal("ok after 3", s.result)
      assert.are.same({ 1, 2 }, H.retry_delays(eng, id, "work"))
      assert.near(3, eng:now() - t0, 1e-3)
      -- each wait names the attempt that failed and its error
      local waits = H.events(eng, id, { event = "step", step = "work", to = "retry_wait" })
      assert.are.same({ 1, 2 }, { waits[1].attempt, waits[2].attempt })
      assert.matches("busy", waits[1].error)
    end)

  it("defaults to 5 attempts, 1 s doubling", function()
    local eng, id, box = run_failing({ jitter = 0 }, function() return busy() end)
    assert.are.equal(5, box.calls)
    assert.are.equal(5, H.step(eng:status(id), "work").attempts)
    assert.are.same({ 1, 2, 4, 8 }, H.retry_delays(eng, id, "work"))
  end)

  it("caps exponential delays at max_delay", function()
    local eng, id = run_failing(
      { max_attempts = 5, initial = 1, multiplier = 3, max_delay = 5, jitter = 0 },
      fails_times(4, busy))
    assert.are.same({ 1, 3, 5, 5 }, H.retry_delays(eng, id, "work"))
  end)

  it("grows linear delays by initial each time", function()
    local eng, id = run_failing(
      { max_attempts = 4, initial = 1.5, strategy = "linear", jitter = 0 },
      fails_times(3, busy))
    assert.are.same({ 1.5, 3, 4.5 }, H.retry_delays(eng, id, "work"))
  end)

  it("keeps fixed delays fixed", function()
    local eng, id, _, t0 = run_failing(
      { max_attempts = 4, initial = 2, strategy = "fixed", jitter = 0 },
      fails_times(3, busy))
    assert.are.same({ 2, 2, 2 }, H.retry_delays(eng, id, "work"))
    assert.near(6, eng:now() - t0, 1e-3)
  end)

  it("keeps jittered delays within +-jitter of the base, reproducibly under one seed",
    function()
      local policy = { max_attempts = 4, initial = 1, multiplier = 2, jitter = 0.2 }
      local eng1, id1 = run_failing(policy, fails_times(3, busy), { seed = 7 })
      local eng2, id2 = run_failing(policy, fails_times(3, busy), { seed = 7 })
      local d1 = H.retry_delays(eng1, id1, "work")
      local d2 = H.retry_delays(eng2, id2, "work")
      assert.are.equal(3, #d1)
      assert.are.same(d1, d2)
      for i, base in ipairs { 1, 2, 4 } do
        assert.is_true(d1[i] >= base * 0.8 - 1e-9 and d1[i] <= base * 1.2 + 1e-9,
          "delay " .. i .. " = " .. d1[i])
      end
    end)

  it("takes the workflow's policy and lets a step override some of its fields", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register {
      name = "layered",
      retry = { max_attempts = 10, initial = 3, multiplier = 1, jitter = 0 },
      steps = { { name = "work", retry = { max_attempts = 2 },
        execute = function() calls = calls + 1; error(busy()) end } },
    }
    local id = eng:start("layered", {})
    eng:run()
    assert.are.equal(2, calls)
    assert.are.same({ 3 }, H.retry_delays(eng, id, "work"))
  end)

  it("waits retry_after when the dependency gives it, instead of the computed backoff",
    function()
      local eng, id, box, t0 = run_failing(
        { max_attempts = 3, initial = 1, jitter = 0 },
        fails_times(1, function() return mend.retryable("slow down", { retry_after = 7 }) end))
      assert.are.equal("succeeded", eng:status(id).status)
      assert.are.equal(2, box.calls)
      assert.are.same({ 7 }, H.retry_delays(eng, id, "work"))
      assert.near(7, eng:now() - t0, 1e-3)
    end)

  it("clamps retry_after by max_retry_after", function()
    local eng, id, box, t0 = run_failing(
      { max_attempts = 3, initial = 1, jitter = 0, max_retry_after = 10 },
      fails_times(1, function() return mend.retryable("slow down", { retry_after = 100 }) end))
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(2, box.calls)
    assert.are.same({ 10 }, H.retry_delays(eng, id, "work"))
    assert.near(10, eng:now() - t0, 1e-3)
  end)

  it("retries a mend error that was caught and raised again", function()
    local eng, id, box = run_failing({ max_attempts = 3, jitter = 0 }, fails_times(1,
      function()
        local _, e = pcall(error, busy())
        return e
      end))
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(2, box.calls)
  end)

  it("treats a returned mend error as raised", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register(H.one_step("returns", {
      retry = { max_attempts = 3, jitter = 0 },
      execute = function()
        calls = calls + 1
        if calls == 1 then return mend.retryable("busy") end
        return "fine"
      end,
    }))
    local id = eng:start("returns", {})
    eng:run()
    local s = H.step(eng:status(id), "work")
    assert.are.equal(2, calls)
    assert.are.equal("succeeded", s.status)
    assert.are.equal("fine", s.result)
  end)

  it("flags the run for attention after attention_after failures and keeps retrying",
    function()
      local eng, alerts = H.engine_with_alerts()
      local calls = 0
      eng:register(H.one_step("slowfix", {
        retry = { max_attempts = 5, initial = 1, jitter = 0, attention_after = 2 },
        execute = function()
          calls = calls + 1
          if calls <= 3 then error(busy()) end
          return "done"
        end,
      }))
      local id = eng:start("slowfix", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(4, calls)
      assert.truthy(st.attention)
      assert.are_not.equal(0, st.attention)
      local att = H.alerts_of(alerts, "attention")
      assert.are.equal(1, #att)
      assert.are.equal(id, att[1].run_id)
      assert.are.equal("work", att[1].step)
    end)
end)

describe("an unknown Lua error", function()
  after_each(H.cleanup)

  local function run_with(body)
    local eng = H.new_engine()
    local calls, compensated = 0, 0
    eng:register {
      name = "unknown",
      retry = { max_attempts = 5, jitter = 0 },
      steps = {
        { name = "prepare", execute = function() return "prepared" end,
          compensate = function() compensated = compensated + 1 end },
        { name = "work", execute = function() calls = calls + 1; return body() end },
      },
    }
    local id = eng:start("unknown", {})
    eng:run()
    return eng, id, calls, compensated
  end

  it("is not retried when it is a plain error(\"boom\")", function()
    local eng, id, calls, compensated = run_with(function() error("boom") end)
    assert.are.equal(1, calls)
    local st = eng:status(id)
    assert.are.equal(1, H.step(st, "work").attempts)
    assert.are.equal("failed", H.step(st, "work").status)
    assert.matches("boom", H.step(st, "work").error)
    assert.are.equal("compensated", st.status)
    assert.are.equal(1, compensated)
    assert.are.same({}, H.retry_delays(eng, id, "work"))
  end)

  it("is not retried when it is a runtime error (indexing nil)", function()
    local eng, id, calls, compensated = run_with(function()
      local t = nil
      return t.field
    end)
    assert.are.equal(1, calls)
    local st = eng:status(id)
    assert.are.equal(1, H.step(st, "work").attempts)
    assert.are.equal("compensated", st.status)
    assert.are.equal(1, compensated)
  end)

  it("fails the run when the first step has it: nothing to compensate", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register(H.one_step("boom", {
      retry = { max_attempts = 5, jitter = 0 },
      execute = function() calls = calls + 1; error("boom") end,
    }))
    local id = eng:start("boom", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal(1, calls)
    assert.are.equal("failed", st.status)
    assert.are.equal("failed", H.step(st, "work").status)
    assert.is_nil(H.dlq_entry(eng, id))
  end)
end)
