-- Limits that keep a host safe: concurrency caps (engine-wide and per breaker), and the
-- per-attempt instruction budget. The embedding API's memory limit and sandbox are tested in
-- tests/test_embed_sandbox.c (they apply to engines that own their Lua state).
local H = require "spec.helper"
local mend = require "mend"

local function sleepers(name, breaker, box)
  return { name = name, steps = { { name = "work", breaker = breaker, execute = function()
    box.now = box.now + 1
    box.peak = math.max(box.peak, box.now)
    mend.sleep(1)
    box.now = box.now - 1
  end } } }
end

describe("concurrency caps", function()
  after_each(H.cleanup)

  it("hold attempts in flight to the engine's max_concurrency, in the order they came", function()
    local box = { now = 0, peak = 0 }
    local eng = H.new_engine({ max_concurrency = 2 })
    eng:register(sleepers("s", nil, box))
    local t0 = eng:now()
    for _ = 1, 10 do eng:start("s", {}) end
    eng:run()
    assert.are.equal(2, box.peak)
    assert.is_truthy(math.abs(eng:now() - t0 - 5) < 1e-6)   -- 10 one-second waits, 2 at a time
    assert.are.equal(10, #eng:runs{ status = "succeeded" })
  end)

  it("hold attempts through one breaker to its max_concurrency, others unaffected", function()
    local db_box, other_box = { now = 0, peak = 0 }, { now = 0, peak = 0 }
    local eng = H.new_engine()
    eng:register(sleepers("db", { key = "db", max_concurrency = 3 }, db_box))
    eng:register(sleepers("free", nil, other_box))
    for _ = 1, 9 do eng:start("db", {}); eng:start("free", {}) end
    eng:run()
    assert.are.equal(3, db_box.peak)
    assert.are.equal(9, other_box.peak)
    assert.are.equal(18, #eng:runs{ status = "succeeded" })
  end)

  it("refuses a negative cap with a message naming the step", function()
    local eng = H.new_engine()
    assert.has_error(function()
      eng:register{ name = "x", steps = { { name = "a", breaker = { max_concurrency = -1 },
        execute = function() end } } }
    end, 'register: step "a": breaker.max_concurrency must be >= 0, got -1')
  end)
end)

describe("the instruction budget", function()
  after_each(H.cleanup)

  it("stops a runaway step, is not retried, parks it as a workflow_error, and leaves the engine usable", function()
    local eng = H.new_engine({ instruction_budget = 100000 })
    eng:register{ name = "spin", steps = { { name = "loop", execute = function()
      local ok = pcall(function() while true do end end)   -- catching it does not help
      while true do end
    end } } }
    eng:register{ name = "fine", steps = { { name = "a", execute = function()
      local n = 0
      for i = 1, 1000 do n = n + i end
      return n
    end } } }
    local bad = eng:start("spin", {})
    local good = eng:start("fine", {})
    eng:run()
    local st = eng:status(bad)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("workflow_error", st.reason)
    assert.are.equal(1, st.steps[1].attempts)
    assert.matches("instruction budget", st.steps[1].error)
    assert.are.equal(1, #eng:dlq())
    assert.are.equal("succeeded", eng:status(good).status)
    assert.are.equal(500500, eng:status(good).steps[1].result)
  end)
end)
