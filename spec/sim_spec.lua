-- mend.sim, the simulated services of the examples: deterministic faults and dedupe by key.
-- Plain Lua except the last block, which checks the helper inside a real engine step.

local mend = require "mend"
local sim = require "mend.sim"

-- Calls svc and returns "ok" or the kind of the error raised, and the result or the error.
local function try(svc, key, v)
  local ok, r = pcall(svc.call, svc, key, v)
  if ok then return "ok", r end
  return mend.is_error(r) or "lua", r
end

-- The outcome of n calls with distinct keys, as a string such as "ok ok retryable ok".
local function pattern(svc, n)
  local seq = {}
  for i = 1, n do seq[i] = (try(svc, "key-" .. i, i)) end
  return table.concat(seq, " ")
end

describe("sim.rng", function()
  it("gives the same sequence for the same seed", function()
    local a, b = sim.rng(42), sim.rng(42)
    for _ = 1, 100 do assert.are.equal(a(), b()) end
  end)

  it("gives different sequences for different seeds", function()
    local a, b = sim.rng(1), sim.rng(2)
    local same = 0
    for _ = 1, 100 do if a() == b() then same = same + 1 end end
    assert.is_true(same < 5)
  end)

  it("stays in [0, 1) and is spread over it", function()
    local r, sum, n = sim.rng(7), 0, 20000
    for _ = 1, n do
      local x = r()
      assert.is_true(x >= 0 and x < 1)
      sum = sum + x
    end
    assert.is_true(math.abs(sum / n - 0.5) < 0.02)
  end)

  it("works with seed 0 and refuses a non-integer seed", function()
    local r = sim.rng(0)
    assert.are_not.equal(r(), r())
    assert.has_error(function() sim.rng(1.5) end)
    assert.has_error(function() sim.rng("x") end)
  end)
end)

describe("a simulated service", function()
  it("fails its first N calls with retryable errors and no effect, then succeeds", function()
    local svc = sim.service{ name = "payments", fail_first = 3 }
    for i = 1, 3 do
      local kind, e = try(svc, "k", "charged")
      assert.are.equal("retryable", kind)
      assert.truthy(tostring(e):find("payments", 1, true))
      assert.truthy(tostring(e):find("call " .. i, 1, true))
      assert.is_nil(svc.applied.k)
    end
    assert.are.same({ "ok", "charged" }, { try(svc, "k", "charged") })
    assert.are.equal(4, svc.calls)
    assert.are.equal(1, svc.applied.k)
    assert.are.same({ { key = "k", result = "charged", call = 4 } }, svc.effects)
  end)

  it("raises fatal errors when its error kind is fatal", function()
    local svc = sim.service{ fail_first = 1, error = "fatal" }
    assert.are.equal("fatal", (try(svc, "k", 1)))
  end)

  it("carries retry_after in its retryable errors", function()
    local svc = sim.service{ fail_first = 1, retry_after = 2.5 }
    local _, e = try(svc, "k", 1)
    assert.are.equal(2.5, e.retry_after)
  end)

  it("fails with probability fail_rate, the same way for the same seed", function()
    local p1 = pattern(sim.service{ fail_rate = 0.3, seed = 5 }, 2000)
    local p2 = pattern(sim.service{ fail_rate = 0.3, seed = 5 }, 2000)
    local p3 = pattern(sim.service{ fail_rate = 0.3, seed = 6 }, 2000)
    assert.are.equal(p1, p2)
    assert.are_not.equal(p1, p3)
    local _, failures = p1:gsub("retryable", "")
    assert.is_true(failures > 0.25 * 2000 and failures < 0.35 * 2000, failures)
  end)

  it("never fails with fail_rate 0 and always fails with fail_rate 1", function()
    assert.is_nil(pattern(sim.service{ fail_rate = 0 }, 200):find("retryable"))
    assert.is_nil(pattern(sim.service{ fail_rate = 1 }, 200):find("ok"))
  end)

  it("draws fail_rate only after fail_first, so fail_first does not shift the pattern", function()
    local plain = pattern(sim.service{ fail_rate = 0.5, seed = 9 }, 50)
    local svc = sim.service{ fail_rate = 0.5, seed = 9, fail_first = 2 }
    assert.are.equal("retryable retryable", pattern(svc, 2))
    assert.are.equal(plain, pattern(svc, 50))
  end)

  it("returns the first result for a repeated key without a second effect", function()
    local svc, effects = sim.service{}, 0
    local function charge(key, n)
      effects = effects + 1
      return { id = "ch-" .. n, key = key }
    end
    local first = svc:call("pay-1", charge)
    local again = svc:call("pay-1", charge)
    assert.are.same({ id = "ch-1", key = "pay-1" }, first)
    assert.are.equal(first, again)
    assert.are.equal(1, effects)
    assert.are.equal(2, svc.calls)
    assert.are.equal(1, svc.applied["pay-1"])
    assert.are.equal(1, #svc.effects)
    assert.are.equal("ch-3", svc:call("pay-2", charge).id)   -- the third call
    assert.are.equal(2, #svc.effects)
  end)

  it("applies every call that has no key", function()
    local svc = sim.service{}
    svc:call(nil, "a")
    svc:call(nil, "a")
    assert.are.equal(2, #svc.effects)
    assert.is_nil(next(svc.applied))
  end)

  it("records nothing when the effect raises or returns a mend error", function()
    local svc = sim.service{}
    assert.are.equal("lua", (try(svc, "k", function() error("boom") end)))
    assert.are.equal("fatal", (try(svc, "k", function() return mend.fatal("declined") end)))
    assert.is_nil(svc.applied.k)
    assert.are.equal(0, #svc.effects)
    assert.are.equal("ok", (try(svc, "k", "done")))
    assert.are.equal(1, svc.applied.k)
  end)

  it("applies the effect, then loses the response, and a retry with the key gets it", function()
    local svc = sim.service{ name = "gateway", lose_first = 1 }
    local kind, e = try(svc, "pay-1", { id = "ch-1" })
    assert.are.equal("retryable", kind)
    assert.truthy(tostring(e):find("response lost", 1, true))
    assert.are.equal(1, svc.applied["pay-1"])
    assert.are.same({ "ok", { id = "ch-1" } }, { try(svc, "pay-1", { id = "ch-2" }) })
    assert.are.equal(1, svc.applied["pay-1"])
    assert.are.equal(1, #svc.effects)
  end)

  it("counts lost responses after the failed calls", function()
    local svc = sim.service{ fail_first = 1, lose_first = 1 }
    assert.are.equal("retryable", (try(svc, "k", 1)))
    assert.is_nil(svc.applied.k)
    assert.are.equal("retryable", (try(svc, "k", 1)))
    assert.are.equal(1, svc.applied.k)
    assert.are.equal("ok", (try(svc, "k", 1)))
  end)

  it("forgets everything on reset and fails the same way again", function()
    local svc = sim.service{ fail_first = 1, fail_rate = 0.4, seed = 3 }
    local before = pattern(svc, 30)
    svc:reset()
    assert.are.equal(0, svc.calls)
    assert.are.same({}, svc.applied)
    assert.are.same({}, svc.effects)
    assert.are.equal(before, pattern(svc, 30))
  end)

  it("waits its latency on every call, failed or not, through the sleep function", function()
    local waited = {}
    local svc = sim.service{ latency = 0.25, fail_first = 1,
                             sleep = function(s) waited[#waited + 1] = s end }
    try(svc, "k", 1)
    try(svc, "k", 1)
    assert.are.same({ 0.25, 0.25 }, waited)
  end)

  it("does not wait outside a step", function()
    local svc = sim.service{ latency = 3600 }
    assert.are.equal(1, svc:call("k", 1))
  end)

  it("refuses bad options with a message naming the field", function()
    local bad = {
      { fail_rate = 2 }, { fail_rate = "often" }, { error = "weird" }, { fail_first = -1 },
      { fail_first = 1.5 }, { lose_first = -2 }, { latency = -1 }, { retry_after = "soon" },
      { sleep = 5 },
    }
    for _, opts in ipairs(bad) do
      local field = next(opts)
      local ok, err = pcall(sim.service, opts)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(field, 1, true), err)
    end
  end)
end)

describe("a simulated service inside an engine step", function()
  local function run_one(svc, retry)
    local eng = mend.engine{ clock = "virtual", seed = 1 }
    local name = eng:register{
      name = "sim_in_step",
      retry = retry or { max_attempts = 5, initial = 1, jitter = 0 },
      steps = {
        { name = "call",
          execute = function(ctx)
            local t0 = ctx:now()
            local r = svc:call(ctx.idempotency_key, "done")
            return { result = r, took = ctx:now() - t0, key = ctx.idempotency_key }
          end },
      },
    }
    local id = eng:start(name, {})
    eng:run()
    local st = eng:status(id)
    eng:close()
    return st
  end

  it("waits its latency with mend.sleep on the engine clock", function()
    local st = run_one(sim.service{ latency = 5 })
    assert.are.equal("succeeded", st.status)
    assert.is_true(math.abs(st.steps[1].result.took - 5) < 1e-6)
  end)

  it("is retried by the engine with the same key, and applies its effect once", function()
    local svc = sim.service{ fail_first = 2, lose_first = 1 }
    local st = run_one(svc)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(4, st.steps[1].attempts)
    assert.are.equal(4, svc.calls)
    assert.are.equal(1, svc.applied[st.steps[1].result.key])
  end)
end)
