-- Circuit breakers: shared by key across runs, opened by retryable failures only; while open
-- no attempt is executed or counted; half-open probes decide whether it closes or reopens.
local mend = require "mend"
local H = require "spec.helper"

-- A dependency whose health the test controls: `fail(n)` says whether call n fails
-- (retryably, unless it returns another error). Every call is recorded with its attempt
-- number and the engine time.
local function dependency(fail)
  local dep = { calls = {} }
  function dep.call(ctx)
    local n = #dep.calls + 1
    dep.calls[n] = { attempt = ctx.attempt, at = ctx:now(), step = ctx.step, run = ctx.run_id }
    local e = fail(n)
    if e == true then error(mend.retryable("payments unavailable")) end
    if e then error(e) end
    return "paid " .. n
  end
  return dep
end

local function first_n_fail(k) return function(n) return n <= k end end

-- one step "charge" on breaker "payments", 1 s fixed retries
local function pay_workflow(dep, max_attempts, name)
  return H.one_step(name or "pay", {
    name = "charge",
    breaker = "payments",
    retry = { max_attempts = max_attempts, initial = 1, strategy = "fixed", jitter = 0 },
    execute = dep.call,
  })
end

local function breaker_moves(eng, id, key)
  local out = {}
  for _, h in ipairs(H.events(eng, id, { event = "breaker" })) do
    if h.detail == key then out[#out + 1] = h.to end
  end
  return out
end

describe("a circuit breaker", function()
  after_each(H.cleanup)

  it("opens after 5 retryable failures and neither executes nor counts attempts while open",
    function()
      local eng = H.new_engine()
      local dep = dependency(first_n_fail(5))
      eng:register(pay_workflow(dep, 20))
      local t0 = eng:now()
      local id = eng:start("pay", {})
      eng:run()

      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      -- 5 failures 1 s apart, then nothing for the 30 s the breaker is open, then the probe
      assert.are.equal(6, #dep.calls)
      for i = 1, 5 do
        assert.are.equal(i, dep.calls[i].attempt)
        assert.near(t0 + (i - 1), dep.calls[i].at, 1e-3)
      end
      assert.are.equal(6, dep.calls[6].attempt)
      assert.is_true(dep.calls[6].at >= t0 + 4 + 30 - 1e-3,
        "probe at +" .. (dep.calls[6].at - t0))
      assert.are.equal(6, H.step(st, "charge").attempts)

      assert.is_true(#H.events(eng, id, { event = "step", step = "charge", to = "breaker_open" })
        >= 1)

      -- one success in half-open does not close it yet
      local b = H.breaker(eng, "payments")
      assert.are.equal("half_open", b.state)
      assert.are.equal(1, b.successes)
    end)

  it("is shared by every run naming its key: a new run waits while it is open", function()
    local eng = H.new_engine()
    local healthy = false
    local dep = dependency(function() return not healthy end)
    eng:register(pay_workflow(dep, 1))
    local failed = {}
    for i = 1, 5 do failed[i] = eng:start("pay", { n = i }) end
    eng:run()
    assert.are.equal(5, #dep.calls)
    local b = H.breaker(eng, "payments")
    assert.is_not_nil(b)
    assert.are.equal("open", b.state)
    assert.is_true(b.open_until >= b.opened_at + 30 - 1e-3)

    healthy = true
    local id = eng:start("pay", { n = 6 })
    eng:run()
    assert.are.equal(6, #dep.calls)
    assert.are.equal(id, dep.calls[6].run)
    assert.is_true(dep.calls[6].at >= b.open_until - 1e-3)
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(1, H.step(st, "charge").attempts)
    assert.are.equal(1, dep.calls[6].attempt)
    assert.is_true(#H.events(eng, id, { event = "step", step = "charge", to = "breaker_open" })
      >= 1)
  end)

  it("reopens when the half-open probe fails", function()
    local eng = H.new_engine()
    local dep = dependency(first_n_fail(6))
    eng:register(pay_workflow(dep, 20))
    local t0 = eng:now()
    local id = eng:start("pay", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(7, #dep.calls)
    assert.is_true(dep.calls[6].at >= t0 + 34 - 1e-3)
    assert.is_true(dep.calls[7].at >= dep.calls[6].at + 30 - 1e-3,
      "second probe only " .. (dep.calls[7].at - dep.calls[6].at) .. " s after the first")
    assert.are.equal(7, H.step(eng:status(id), "charge").attempts)
  end)

  it("records each of its state changes in the history of the run that caused it", function()
    local eng = H.new_engine()
    local dep = dependency(first_n_fail(6))
    local def = pay_workflow(dep, 20)
    for i = 2, 3 do
      def.steps[i] = { name = "charge" .. i, breaker = "payments", execute = dep.call }
    end
    eng:register(def)
    local id = eng:start("pay", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "open", "half_open", "open", "half_open", "closed" },
      breaker_moves(eng, id, "payments"))
  end)

  it("closes after 3 successes in half-open", function()
    local eng = H.new_engine()
    local dep = dependency(first_n_fail(5))
    local def = pay_workflow(dep, 20)
    for i = 2, 3 do
      def.steps[i] = { name = "charge" .. i, breaker = "payments", execute = dep.call }
    end
    eng:register(def)
    local id = eng:start("pay", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(8, #dep.calls)
    local b = H.breaker(eng, "payments")
    assert.are.equal("closed", b.state)
    assert.are.equal(0, b.failures)
    local moves = breaker_moves(eng, id, "payments")
    assert.are.equal("closed", moves[#moves])
  end)

  it("admits one half-open probe at a time", function()
    local eng = H.new_engine()
    local healthy = false
    local in_flight, intervals = 0, {}
    eng:register(H.one_step("probe", {
      name = "charge",
      breaker = "payments",
      retry = { max_attempts = 1 },
      execute = function(ctx)
        if not healthy then error(mend.retryable("down")) end
        in_flight = in_flight + 1
        local start = ctx:now()
        mend.sleep(1)
        intervals[#intervals + 1] = { start = start, finish = ctx:now() }
        in_flight = in_flight - 1
        return "ok"
      end,
    }))
    for i = 1, 5 do eng:start("probe", { n = i }) end
    eng:run()
    assert.are.equal("open", H.breaker(eng, "payments").state)
    healthy = true
    local ids = {}
    for i = 1, 4 do ids[i] = eng:start("probe", { m = i }) end
    eng:run()
    for _, id in ipairs(ids) do assert.are.equal("succeeded", eng:status(id).status) end
    assert.are.equal(4, #intervals)
    table.sort(intervals, function(a, b) return a.start < b.start end)
    for i = 2, 3 do
      assert.is_true(intervals[i].start >= intervals[i - 1].finish - 1e-9,
        "probe " .. i .. " started while probe " .. (i - 1) .. " was in flight")
    end
    assert.are.equal("closed", H.breaker(eng, "payments").state)
  end)

  it("keeps to one probe at a time when an attempt admitted before it opened ends while it is "
    .. "half-open", function()
    local eng = H.new_engine()
    local probes_in_flight, most = 0, 0
    local policy = { key = "ledger", failure_threshold = 2, open_seconds = 30, success_threshold = 3,
                     half_open_max = 1 }
    -- admitted while closed; still in flight when the breaker opens and half-opens
    eng:register(H.one_step("straggler", { breaker = policy, retry = { max_attempts = 1 },
      execute = function() mend.sleep(40); return "late" end }))
    eng:register(H.one_step("failing", { breaker = "ledger", retry = { max_attempts = 1 },
      execute = function() error(mend.retryable("down")) end }))
    eng:register(H.one_step("probe", { breaker = "ledger", retry = { max_attempts = 5, jitter = 0 },
      execute = function()
        probes_in_flight = probes_in_flight + 1
        most = math.max(most, probes_in_flight)
        mend.sleep(20)
        probes_in_flight = probes_in_flight - 1
        return "ok"
      end }))
    local straggler = eng:start("straggler", {})
    eng:advance(1)
    eng:start("failing", {})
    eng:start("failing", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "ledger").state)
    local ids = {}
    for i = 1, 3 do ids[i] = eng:start("probe", { n = i }) end
    eng:run()
    assert.are.equal("succeeded", eng:status(straggler).status)
    for _, id in ipairs(ids) do assert.are.equal("succeeded", eng:status(id).status) end
    assert.are.equal(1, most)
    assert.are.equal("closed", H.breaker(eng, "ledger").state)
  end)

  -- A probe of a half-open spell that ended (its sibling probe failed: the breaker opened
  -- again) still out when the next spell admits its own: its end gives back no slot of the
  -- new spell (a third probe would start beside two) and its outcome is not counted.
  it("keeps to half_open_max when a probe of an earlier half-open spell ends in a later one",
     function()
    local eng = H.new_engine()
    local q_in_flight, most = 0, 0
    local policy = { key = "vault", failure_threshold = 2, open_seconds = 30, success_threshold = 3,
                     half_open_max = 2 }
    eng:register(H.one_step("failing", { breaker = policy, retry = { max_attempts = 1 },
      execute = function() error(mend.retryable("down")) end }))
    eng:register(H.one_step("quickfail", { breaker = "vault", retry = { max_attempts = 1 },
      execute = function() mend.sleep(1); error(mend.retryable("still down")) end }))
    eng:register(H.one_step("slowprobe", { breaker = "vault", retry = { max_attempts = 1 },
      execute = function() mend.sleep(40); return "late" end }))
    eng:register(H.one_step("q", { breaker = "vault", retry = { max_attempts = 1 },
      execute = function()
        q_in_flight = q_in_flight + 1
        most = math.max(most, q_in_flight)
        mend.sleep(20)
        q_in_flight = q_in_flight - 1
        return "ok"
      end }))
    eng:start("failing", {})
    eng:start("failing", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "vault").state)
    eng:advance(30)   -- time to half-open: the next two attempts are its probes
    eng:start("quickfail", {})
    eng:start("slowprobe", {})
    eng:advance(2)    -- the quick probe failed: open again, the slow one still out
    assert.are.equal("open", H.breaker(eng, "vault").state)
    local ids = {}
    for i = 1, 4 do ids[i] = eng:start("q", { n = i }) end
    eng:run()
    for _, id in ipairs(ids) do assert.are.equal("succeeded", eng:status(id).status) end
    assert.are.equal(2, most)
  end)

  it("does not count business errors or unknown errors", function()
    local eng = H.new_engine()
    local errors = { mend.fatal("declined"), mend.fatal("declined"), "boom", "boom",
      mend.compensable("partial", { severity = 1 }), mend.fatal("declined") }
    local dep = dependency(function(n) return errors[n] end)
    eng:register(pay_workflow(dep, 5))
    for i = 1, #errors do eng:start("pay", { n = i }) end
    eng:run()
    assert.are.equal(#errors, #dep.calls)
    local b = H.breaker(eng, "payments")
    if b then
      assert.are.equal("closed", b.state)
      assert.are.equal(0, b.failures)
    end
    local t1 = eng:now()
    local id = eng:start("pay", { n = 7 })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.near(t1, dep.calls[#dep.calls].at, 1e-3)
  end)

  it("follows a step's own breaker policy", function()
    local eng = H.new_engine()
    local dep = dependency(first_n_fail(2))
    eng:register(H.one_step("inv", {
      name = "reserve",
      breaker = { key = "inventory", failure_threshold = 2, open_seconds = 10 },
      retry = { max_attempts = 10, initial = 1, strategy = "fixed", jitter = 0 },
      execute = dep.call,
    }))
    local t0 = eng:now()
    local id = eng:start("inv", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(3, #dep.calls)
    assert.is_true(dep.calls[3].at >= t0 + 1 + 10 - 1e-3)
    assert.is_true(dep.calls[3].at < t0 + 1 + 30)
    assert.is_not_nil(H.breaker(eng, "inventory"))
  end)

  it("is keyed by the step's name by default, with the workflow's breaker policy", function()
    local eng = H.new_engine()
    local dep = dependency(first_n_fail(3))
    eng:register {
      name = "wfpolicy",
      breaker = { failure_threshold = 3, open_seconds = 12 },
      retry = { max_attempts = 10, initial = 1, strategy = "fixed", jitter = 0 },
      steps = { { name = "lookup", execute = dep.call } },
    }
    local t0 = eng:now()
    local id = eng:start("wfpolicy", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(4, #dep.calls)
    assert.is_true(dep.calls[4].at >= t0 + 2 + 12 - 1e-3)
    assert.is_true(dep.calls[4].at < t0 + 2 + 30)
    local b = H.breaker(eng, "lookup")
    assert.is_not_nil(b)
    assert.are.equal("half_open", b.state)
  end)

  it("survives a restart: its state is read back from the database", function()
    local eng, path = H.new_engine()
    local dep = dependency(function() return true end)
    eng:register(pay_workflow(dep, 1))
    for i = 1, 5 do eng:start("pay", { n = i }) end
    eng:run()
    local b = H.breaker(eng, "payments")
    assert.are.equal("open", b.state)
    H.close(eng)

    local eng2 = H.reopen(path)
    local b2 = H.breaker(eng2, "payments")
    assert.is_not_nil(b2)
    assert.are.equal("open", b2.state)
    assert.near(b.open_until, b2.open_until, 1e-6)
  end)
end)

describe("the breakers listed", function()
  after_each(H.cleanup)

  local function keys(eng)
    local out = {}
    for _, b in ipairs(eng:breakers()) do out[#out + 1] = b.key end
    table.sort(out)
    return out
  end

  it("are those of the steps that execute: a group and a map, which execute nothing, have none",
    function()
      local eng = H.new_engine()
      local asked = 0
      eng:register{ name = "shapes", steps = {
        -- a when that raises first: the group's failed attempt asks no breaker
        { name = "g", when = function()
            asked = asked + 1
            if asked == 1 then error(mend.retryable("not yet")) end
            return true
          end,
          parallel = { { name = "a", execute = function() return 1 end },
                       { name = "b", breaker = "shared", execute = function() return 2 end } } },
        { name = "m", map = function() return { 1, 2 } end,
          step = { execute = function() return 3 end } },
      } }
      eng:register{ name = "refused", steps = {
        { name = "h", when = function() error(mend.fatal("no")) end,
          parallel = { { name = "x", execute = function() return 1 end } } },
      } }
      local id = eng:start("shapes", {})
      local other = eng:start("refused", {})
      eng:run()
      assert.are.equal("succeeded", eng:status(id).status)
      assert.are.equal(2, asked)
      assert.are.equal("failed", eng:status(other).status)
      assert.are.same({ "g/a", "h/x", "m/item", "shared" }, keys(eng))
    end)

  it("are none for a step that only waits (an event, a sleep): it asks no breaker", function()
    local eng = H.new_engine()
    eng:register{ name = "waits", steps = {
      { name = "approve", wait_for = "go", timeout = 60 },
      { name = "pause", sleep = 5 },
      { name = "charge", execute = function() return 1 end },
      { name = "ship", breaker = "carrier", execute = function() return 2 end },
    } }
    assert.are.same({ "carrier", "charge" }, keys(eng))
    local id = eng:start("waits", {})
    eng:signal(id, "go", true)
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "carrier", "charge" }, keys(eng))
    -- one that executes, under the key a waiting step's name had, is listed as ever
    eng:register{ name = "later", steps = {
      { name = "w", breaker = "approve", execute = function() return 3 end } } }
    assert.are.same({ "approve", "carrier", "charge" }, keys(eng))
  end)
end)
