-- Acceptance, from outside: what SPEC sections 2, 3, 5, 7 and 8 promise of sagas, the
-- dead-letter queue and breakers, read through the Lua API on SQLite files and the virtual clock.
local mend = require "mend"
local H = require "spec.helper"

-- Steps a, b, c (c has no compensate) and d, which fails with `last(box)`; every execute and
-- compensate is logged in box.log; `comp_b(box)` is b's compensate when given.
local function saga(last, comp_b, extra)
  local box = { log = {}, results = {} }
  local function step(name, with_comp)
    return {
      name = name,
      execute = function() box.log[#box.log + 1] = "do " .. name; return name .. "-r" end,
      compensate = with_comp and function(ctx, result)
        box.log[#box.log + 1] = "undo " .. name
        box.results[name] = result
        box.keys = box.keys or {}
        box.keys[name] = ctx.idempotency_key
      end or nil,
    }
  end
  local b = step("b", true)
  if comp_b then
    b.compensate = function(ctx, result)
      box.log[#box.log + 1] = "undo b"
      return comp_b(box, ctx, result)
    end
  end
  local def = {
    name = "saga",
    retry = { jitter = 0 },
    steps = {
      step("a", true), b, step("c", false),
      { name = "d", retry = { max_attempts = 2, jitter = 0 },
        execute = function() box.log[#box.log + 1] = "do d"; local e = last(box);
          if e then error(e) end end,
        compensate = function(_, result) box.log[#box.log + 1] = "undo d";
          box.d_result = result end },
    },
  }
  for k, v in pairs(extra or {}) do def[k] = v end
  return def, box
end

local function start(def, opts)
  local eng, alerts = H.engine_with_alerts(opts)
  eng:register(def)
  local id = eng:start(def.name, {})
  eng:run()
  return eng, id, alerts
end

describe("acceptance: compensation #sqlite", function()
  after_each(H.cleanup)

  it("undoes the done steps in reverse order with their results, skipping and logging c",
    function()
      local def, box = saga(function() return mend.fatal("declined") end)
      local eng, id = start(def)
      assert.are.same({ "do a", "do b", "do c", "do d", "undo b", "undo a" }, box.log)
      assert.are.same({ a = "a-r", b = "b-r" }, box.results)
      assert.are.same({ a = id .. "/a", b = id .. "/b" }, box.keys)
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.are.equal("fatal", st.reason)
      assert.are.equal(1, #H.events(eng, id, { event = "skip_compensate", step = "c" }))
      assert.are.equal("failed", H.step(st, "d").status)
      assert.are.equal("compensated", H.step(st, "a").status)
    end)

  it("compensates a compensable step first, with no result; severity 2 alerts", function()
    local def, box = saga(function() return mend.compensable("half", { severity = 2 }) end)
    local eng, id, alerts = start(def)
    assert.are.same({ "do a", "do b", "do c", "do d", "undo d", "undo b", "undo a" }, box.log)
    assert.is_nil(box.d_result)
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("severity_2", st.reason)
    assert.are.equal(1, #H.alerts_of(alerts, "compensated_with_alert"))
  end)

  it("sends severity 3 to the dead-letter queue without compensating", function()
    local def, box = saga(function() return mend.compensable("unsure", { severity = 3 }) end)
    local eng, id, alerts = start(def)
    assert.are.same({ "do a", "do b", "do c", "do d" }, box.log)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("severity_3", st.reason)
    local d = H.dlq_entry(eng, id)
    assert.are.equal("d", d.step)
    assert.matches("unsure", d.error)
    assert.is_number(d.at)
    assert.are.equal(1, #H.alerts_of(alerts, "dead_letter"))
  end)

  it("retries a compensation 3 times, 1 s then 2 s, then dead-letters with the story",
    function()
      local def, box = saga(function() return mend.fatal("declined") end,
        function() error(mend.retryable("refund down")) end)
      local eng, id, alerts = start(def)
      assert.are.same({ "do a", "do b", "do c", "do d", "undo b", "undo b", "undo b" }, box.log)
      local st = eng:status(id)
      assert.are.equal("needs_attention", st.status)
      assert.are.equal("compensation_failed", st.reason)
      assert.are.equal("compensation_failed", H.step(st, "b").status)
      assert.are.equal(3, H.step(st, "b").comp_attempts)
      assert.are.equal("succeeded", H.step(st, "a").status)   -- not compensated, and says so
      local cf = H.events(eng, id, { event = "compensate_failed", step = "b" })
      local delays = {}
      for _, h in ipairs(cf) do delays[#delays + 1] = h.delay end
      assert.are.same({ 1, 2 }, delays)
      local d = H.dlq_entry(eng, id)
      assert.are.equal("b", d.step)
      assert.are.equal("compensation_failed", d.reason)
      assert.matches("refund down", d.error)
      assert.are.equal(1, #H.alerts_of(alerts, "dead_letter"))
      assert.are.equal(1, #H.events(eng, id, { event = "dead_letter" }))
    end)

  -- SPEC 4's attention_after is a field of every retry policy, compensate_retry's too: a
  -- refund that keeps failing tells a person while its retries go on.
  it("flags attention after compensate_retry's attention_after failures, retries going on",
    function()
      local n = 0
      local def, box = saga(function() return mend.fatal("declined") end,
        function() n = n + 1; if n < 4 then error(mend.retryable("refund down")) end end,
        { compensate_retry = { max_attempts = 5, attention_after = 2, jitter = 0 } })
      local eng, id, alerts = start(def)
      assert.are.same({ "do a", "do b", "do c", "do d", "undo b", "undo b", "undo b", "undo b",
                        "undo a" }, box.log)
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.truthy(st.attention)
      local att = H.alerts_of(alerts, "attention")
      assert.are.equal(1, #att)
      assert.are.equal("b", att[1].step)
      assert.matches("refund down", att[1].error)
      assert.are.equal(1, #eng:runs{ attention = true })
    end)

  it("dlq retry resumes the failed compensation with fresh attempts, then the rest", function()
    local broken = true
    local def, box = saga(function() return mend.fatal("declined") end,
      function() if broken then error(mend.retryable("refund down")) end end)
    local eng, id = start(def)
    assert.are.equal("needs_attention", eng:status(id).status)
    broken = false
    box.log = {}
    eng:dlq_retry(id, { who = "ana" })
    eng:run()
    assert.are.same({ "undo b", "undo a" }, box.log)
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.is_nil(H.dlq_entry(eng, id))
    assert.matches("declined", st.error)
  end)

  it("dlq resolve ends the run resolved, with the note and who in its history", function()
    local def = saga(function() return mend.fatal("declined") end,
      function() error(mend.retryable("refund down")) end)
    local eng, id = start(def)
    eng:resolve(id, { note = "refunded by hand", who = "ana" })
    assert.are.equal("resolved", eng:status(id).status)
    assert.is_nil(H.dlq_entry(eng, id))
    local found = false
    for _, h in ipairs(eng:history(id)) do
      local text = (h.detail or "") .. " " .. tostring(h.who or "")
      if text:find("refunded by hand", 1, true) then found = true end
    end
    assert.is_true(found, "the note is in the history")
    assert.has_error(function() eng:dlq_retry(id, { who = "ana" }) end)
  end)

  it("refuses a dlq retry of a run not in the queue", function()
    local def = saga(function() end)
    local eng, id = start(def)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.has_error(function() eng:dlq_retry(id, {}) end)
    assert.has_error(function() eng:resolve(id, { note = "x" }) end)
  end)

  it("compensates and dead-letters a run whose attempts ran out", function()
    local def, box = saga(function() return mend.retryable("busy") end)
    local eng, id = start(def)
    assert.are.same({ "do a", "do b", "do c", "do d", "do d", "undo b", "undo a" }, box.log)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("attempts_exhausted", st.reason)
    assert.are.equal("d", H.dlq_entry(eng, id).step)
  end)

  it("does not compensate a single failed first step: the run is failed", function()
    local eng = H.new_engine()
    eng:register(H.one_step("one", { execute = function() error(mend.fatal("no")) end,
                                     compensate = function() error("must not run") end }))
    local id = eng:start("one", {})
    eng:run()
    assert.are.equal("failed", eng:status(id).status)
  end)

  it("refuses an illegal transition: a cancel of a run that ended", function()
    local def = saga(function() end)
    local eng, id = start(def)
    assert.has_error(function() eng:cancel(id, { who = "x" }) end)
  end)
end)

describe("acceptance: breakers #sqlite", function()
  after_each(H.cleanup)

  -- n runs of a one-step workflow `name` through breaker `key`, whose calls fail while
  -- box.down; returns the engine, ids and box.
  local function breaker_runs(eng, name, key, box, policy, max_attempts)
    eng:register({ name = name, breaker = policy,
      steps = { { name = "call", breaker = key, retry = { max_attempts = max_attempts or 20,
        jitter = 0,
                                                          initial = 1, max_delay = 1 },
        execute = function()
          box.calls = box.calls + 1
          if box.down then error(mend.retryable("down")) end
          return "ok"
        end } } })
  end

  it("opens after 5 retryable failures, executes nothing while open, half-opens after 30 s",
    function()
      local eng = H.new_engine()
      local box = { calls = 0, down = true }
      breaker_runs(eng, "w", "dep", box)
      local id = eng:start("w", {})
      -- 5 failures at t0, +1, +2, +3, +4: open until about +34
      local t0 = eng:now()
      for _ = 1, 6 do eng:advance(1) end
      assert.are.equal(5, box.calls)
      assert.are.equal("open", H.breaker(eng, "dep").state)
      assert.are.equal("breaker_open", H.step(eng:status(id), "call").status)
      eng:advance(20)
      assert.are.equal(5, box.calls)                  -- nothing executed while open
      assert.are.equal(5, H.step(eng:status(id), "call").attempts)   -- nor counted
      box.down = false
      eng:run()
      assert.are.equal("succeeded", eng:status(id).status)
      assert.are.equal(6, H.step(eng:status(id), "call").attempts)
      assert.is_true(eng:now() - t0 >= 34 - 1e-6)
    end)

  it("opens again on one failed half-open probe, closes after 3 successes", function()
    local eng = H.new_engine()
    local box = { calls = 0, down = true }
    breaker_runs(eng, "w", "dep", box)
    local id1 = eng:start("w", {})
    for _ = 1, 6 do eng:advance(1) end
    assert.are.equal("open", H.breaker(eng, "dep").state)
    eng:advance(40)                        -- the probe fails: open again
    assert.are.equal(6, box.calls)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    box.down = false
    eng:run()
    assert.are.equal("succeeded", eng:status(id1).status)
    -- one success in half-open: still half-open until 3
    local b = H.breaker(eng, "dep")
    assert.are_not.equal("closed", b.state)
    for _ = 1, 2 do
      local id = eng:start("w", {})
      eng:run()
      assert.are.equal("succeeded", eng:status(id).status)
    end
    assert.are.equal("closed", H.breaker(eng, "dep").state)
  end)

  it("is shared by key across workflows and not moved by fatal errors", function()
    local eng = H.new_engine()
    local box = { calls = 0, down = true }
    breaker_runs(eng, "w1", "shared", box, nil, 3)
    breaker_runs(eng, "w2", "shared", box, nil, 3)
    local fatal_calls = 0
    eng:register({ name = "f", steps = { { name = "call", breaker = "shared",
      execute = function() fatal_calls = fatal_calls + 1; error(mend.fatal("bad input")) end } } })
    for _ = 1, 6 do eng:start("f", {}) end
    eng:run()
    assert.are.equal(6, fatal_calls)
    assert.are.equal("closed", H.breaker(eng, "shared").state)
    eng:start("w1", {})
    eng:start("w2", {})
    for _ = 1, 4 do eng:advance(1) end
    -- 3 attempts each, the last two admitted together while it was closed
    assert.are.equal(6, box.calls)
    assert.are.equal("open", H.breaker(eng, "shared").state)
    -- another key is not affected
    local other = { calls = 0, down = false }
    breaker_runs(eng, "w3", "other", other)
    local id3 = eng:start("w3", {})
    eng:advance(0)
    eng:run()
    assert.are.equal("succeeded", eng:status(id3).status)
  end)

  it("survives a restart open", function()
    local eng, path = H.new_engine()
    local box = { calls = 0, down = true }
    breaker_runs(eng, "w", "dep", box, nil, 5)
    eng:start("w", {})
    eng:run()
    assert.are.equal("open", H.breaker(eng, "dep").state)
    H.close(eng)
    local eng2 = H.reopen(path)
    assert.are.equal("open", H.breaker(eng2, "dep").state)
  end)
end)
