-- The foundation: a run goes through its steps on the real engine, every transition is
-- recorded and committed to the SQLite file, and a step can wait, run child processes and
-- be stopped by its timeout.
local mend = require "mend"
local H = require "spec.helper"

-- A copy of a table as it is now (ctx.results is read at the time of the attempt).
local function snapshot(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

describe("a workflow run", function()
  after_each(H.cleanup)

  local function three_steps(seen)
    return {
      name = "happy",
      steps = {
        { name = "reserve",
          execute = function(ctx, input)
            seen.reserve = { input = input, results = snapshot(ctx.results) }
            return { reservation = "r-" .. input.order, qty = input.qty }
          end },
        { name = "charge",
          execute = function(ctx, input)
            seen.charge = { reservation = ctx.results.reserve.reservation }
            return { charge = "c-" .. input.order, amount = ctx.results.reserve.qty * 10 }
          end },
        { name = "ship",
          execute = function(ctx)
            seen.ship = { reserve = ctx.results.reserve, charge = ctx.results.charge }
            return "shipped " .. ctx.results.charge.charge
          end },
      },
    }
  end

  it("refuses eng:run(file): it runs what was started and had ignored the file unsaid", function()
    local eng = H.new_engine({ clock = "virtual" })
    local ok, err = pcall(eng.run, eng, "order.lua")
    assert.is_false(ok)
    assert.matches("run: takes no argument, got string", err, 1, true)
    eng:run(nil)
    H.close(eng)
  end)

  it("runs every step to success and passes each result to the later steps", function()
    local eng = H.new_engine()
    local seen = {}
    assert.are.equal("happy", eng:register(three_steps(seen)))
    local id, existed = eng:start("happy", { order = 17, qty = 3 })
    assert.is_string(id)
    assert.is_false(existed)
    eng:run()

    local st = eng:status(id)
    assert.are.equal(id, st.id)
    assert.are.equal("happy", st.workflow)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ order = 17, qty = 3 }, st.input)
    assert.are.equal(3, #st.steps)
    for i, name in ipairs { "reserve", "charge", "ship" } do
      assert.are.equal(name, st.steps[i].name)
      assert.are.equal("succeeded", st.steps[i].status)
      assert.are.equal(1, st.steps[i].attempts)
    end
    assert.are.same({ reservation = "r-17", qty = 3 }, H.step(st, "reserve").result)
    assert.are.same({ charge = "c-17", amount = 30 }, H.step(st, "charge").result)
    assert.are.equal("shipped c-17", H.step(st, "ship").result)

    assert.are.same({ order = 17, qty = 3 }, seen.reserve.input)
    assert.are.same({}, seen.reserve.results)
    assert.are.equal("r-17", seen.charge.reservation)
    assert.are.same({ reservation = "r-17", qty = 3 }, seen.ship.reserve)
    assert.are.same({ charge = "c-17", amount = 30 }, seen.ship.charge)
  end)

  it("records running -> succeeded in the history of every step, after running was recorded",
    function()
      local eng = H.new_engine()
      eng:register(three_steps({}))
      local id = eng:start("happy", { order = 1, qty = 1 })
      eng:run()
      local hist = eng:history(id)
      assert.is_true(#hist > 0)
      for _, name in ipairs { "reserve", "charge", "ship" } do
        local t = H.transitions(eng, id, name)
        local ran
        for i, tr in ipairs(t) do if tr:match("%->running$") then ran = ran or i end end
        local done = H.index_of(t, "running->succeeded")
        assert.is_not_nil(ran, name .. ": " .. table.concat(t, ", "))
        assert.is_not_nil(done, name .. ": " .. table.concat(t, ", "))
        assert.is_true(ran < done)
        local ev = H.events(eng, id, { event = "step", step = name, to = "succeeded" })[1]
        assert.are.equal(1, ev.attempt)
      end
      -- the steps ran in order
      local order = {}
      for _, h in ipairs(hist) do
        if h.event == "step" and h.to == "succeeded" then order[#order + 1] = h.step end
      end
      assert.are.same({ "reserve", "charge", "ship" }, order)
      -- and the run itself ended succeeded
      local runs = H.events(eng, id, { event = "run", to = "succeeded" })
      assert.are.equal(1, #runs)
      -- seq grows
      for i = 2, #hist do assert.is_true(hist[i].seq > hist[i - 1].seq) end
    end)

  it("gives its history in pages that join to the whole, and its tail", function()
    local eng = H.new_engine()
    eng:register(three_steps({}))
    local id = eng:start("happy", { order = 2, qty = 1 })
    eng:run()
    local whole = eng:history(id)
    assert.is_true(#whole >= 7, #whole)
    local joined, after = {}, 0
    repeat
      local page = eng:history(id, { after = after, limit = 3 })
      assert.is_true(#page <= 3)
      for _, h in ipairs(page) do joined[#joined + 1] = h end
      after = page[#page] and page[#page].seq
    until #page < 3
    assert.are.same(whole, joined)
    assert.are.same(table.move(whole, #whole - 1, #whole, 1, {}), eng:history(id, { tail = 2 }))
    assert.are.same(whole, eng:history(id, { tail = #whole + 5 }))
    assert.are.same(whole, eng:history(id, {}))
    assert.are.same({ nil, "no run no-such-run" }, { eng:history("no-such-run", { tail = 3 }) })
    for _, bad in ipairs { { after = -1 }, { limit = "x" }, { tail = 1.5 }, { tail = 2, after = 1 } } do
      local ok, err = pcall(eng.history, eng, id, bad)
      assert.is_false(ok)
      assert.matches("history: ", tostring(err))
    end
  end)

  it("has committed the run to the SQLite file: a second engine on the same file reads it",
    function()
      local eng, path = H.new_engine()
      eng:register(three_steps({}))
      local id = eng:start("happy", { order = 5, qty = 2 })
      eng:run()

      local eng2 = H.reopen(path)
      local st = eng2:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.same({ order = 5, qty = 2 }, st.input)
      for _, s in ipairs(st.steps) do assert.are.equal("succeeded", s.status) end
      assert.are.same({ charge = "c-5", amount = 20 }, H.step(st, "charge").result)
      local t = {}
      for _, h in ipairs(eng2:history(id)) do
        if h.event == "step" and h.from == "running" and h.to == "succeeded" then
          t[#t + 1] = h.step
        end
      end
      assert.are.same({ "reserve", "charge", "ship" }, t)

      -- and plain SQL sees the same
      assert.are.same({ "succeeded" },
        H.sql(path, "SELECT status FROM runs WHERE id = '" .. id .. "'"))
      assert.are.same({ "3" }, H.sql(path,
        "SELECT count(*) FROM steps WHERE run_id = '" .. id .. "' AND status = 'succeeded'"))
    end)

  it("writes a step's row at its first transition, and lists the steps not begun as pending",
    function()
      local eng, path = H.new_engine()
      local wf = {
        name = "stops_early",
        steps = {
          { name = "first", execute = function() return 1 end },
          { name = "second", execute = function() error(mend.fatal("no")) end },
          { name = "third", execute = function() return 3 end },
        },
      }
      eng:register(wf)
      -- started for a worker, not run here: no step has begun
      local waiting = eng:start("stops_early", {}, { detached = true })
      local st = eng:status(waiting)
      assert.are.same({ "first", "second", "third" },
        { st.steps[1].name, st.steps[2].name, st.steps[3].name })
      for i, s in ipairs(st.steps) do
        assert.are.equal("pending", s.status)
        assert.are.equal(0, s.attempts)
        assert.are.equal(i - 1, s.idx)
        assert.are.equal(waiting .. "/" .. s.name, s.idempotency_key)
      end
      assert.is_nil(st.step_names)
      assert.are.same({ "0" }, H.sql(path,
        "SELECT count(*) FROM steps WHERE run_id = '" .. waiting .. "'"))

      local id = eng:start("stops_early", {})
      eng:run()
      st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.are.same({ "succeeded", "failed", "pending" },
        { st.steps[1].status, st.steps[2].status, st.steps[3].status })
      assert.are.same({ "first|succeeded", "second|failed" }, H.sql(path,
        "SELECT name || '|' || status FROM steps WHERE run_id = '" .. id .. "' ORDER BY idx"))

      -- a worker takes the waiting run from the store alone, and runs it the same way
      local eng2 = H.reopen(path)
      eng2:register(wf)
      eng2:recover()
      eng2:run()
      local st2 = eng2:status(waiting)
      assert.are.equal("compensated", st2.status)
      assert.are.same({ "succeeded", "failed", "pending" },
        { st2.steps[1].status, st2.steps[2].status, st2.steps[3].status })
    end)

  it("gives each attempt its context", function()
    local eng = H.new_engine()
    local ctxs = {}
    eng:register {
      name = "ctxwf",
      steps = {
        { name = "first", execute = function(ctx)
            ctxs.first = { run_id = ctx.run_id, workflow = ctx.workflow, step = ctx.step,
              attempt = ctx.attempt, key = ctx.idempotency_key, input = ctx.input,
              compensating = ctx.compensating, now = ctx:now() }
            return 1
          end },
        { name = "second", execute = function(ctx)
            ctxs.second = { step = ctx.step, key = ctx.idempotency_key,
              results = snapshot(ctx.results) }
            return 2
          end },
      },
    }
    local t0 = eng:now()
    local id = eng:start("ctxwf", { a = "b" })
    eng:run()
    assert.near(t0, ctxs.first.now, 1e-6)
    assert.are.equal(false, ctxs.first.compensating)   -- false, not nil, outside compensate
    ctxs.first.now, ctxs.first.compensating = nil, nil
    assert.are.same({ run_id = id, workflow = "ctxwf", step = "first", attempt = 1,
      key = id .. "/first", input = { a = "b" } }, ctxs.first)
    assert.are.same({ step = "second", key = id .. "/second", results = { first = 1 } },
      ctxs.second)
    local st = eng:status(id)
    assert.are.equal(id .. "/first", H.step(st, "first").idempotency_key)
    assert.are.equal(id .. "/second", H.step(st, "second").idempotency_key)
  end)

  it("records ctx:log lines in the run's history", function()
    local eng = H.new_engine()
    eng:register(H.one_step("logs", { execute = function(ctx)
      ctx:log("charged %d cents", 250)
    end }))
    local id = eng:start("logs", {})
    eng:run()
    local logs = H.events(eng, id, { event = "log", step = "work" })
    assert.are.equal(1, #logs)
    assert.are.equal("charged 250 cents", logs[1].detail)
  end)

  it("fails a step that returns a function, with an error that says so, without retrying",
    function()
      local eng = H.new_engine()
      local calls = 0
      eng:register(H.one_step("badresult", {
        retry = { max_attempts = 3, jitter = 0 },
        execute = function() calls = calls + 1; return function() end end,
      }))
      local id = eng:start("badresult", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("failed", st.status)
      local s = H.step(st, "work")
      assert.are.equal("failed", s.status)
      assert.are.equal(1, calls)
      assert.are.equal(1, s.attempts)
      assert.is_string(s.error)
      assert.matches("function", s.error)
    end)
end)

describe("mend.sleep", function()
  after_each(H.cleanup)

  it("moves the virtual clock on instead of blocking", function()
    local eng = H.new_engine()
    local before, after
    eng:register(H.one_step("nap", { execute = function(ctx)
      before = ctx:now()
      mend.sleep(120)
      after = ctx:now()
      ctx:sleep(30)
      return after - before
    end }))
    local t0 = eng:now()
    local w0 = H.wall()
    local id = eng:start("nap", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.near(120, after - before, 1e-6)
    assert.near(150, eng:now() - t0, 1e-3)
    assert.is_true(H.wall() - w0 < 5)
  end)
end)

describe("mend.exec", function()
  after_each(H.cleanup)

  local function exec_step(args)
    local eng = H.new_engine()
    eng:register(H.one_step("sh", { execute = function() return mend.exec(args) end }))
    local id = eng:start("sh", {})
    eng:run()
    return eng:status(id)
  end

  it("runs a child process and returns its status and output", function()
    local st = exec_step { "sh", "-c", "echo hi" }
    assert.are.equal("succeeded", st.status)
    local r = H.step(st, "work").result
    assert.are.equal(0, r.status)
    assert.are.equal("hi\n", r.stdout)
    assert.are.equal("", r.stderr)
  end)

  it("feeds stdin and sets the working directory and environment", function()
    local st = exec_step { "sh", "-c", "cat; pwd; echo \"$A\"; echo oops >&2; exit 3",
      stdin = "text\n", cwd = "/tmp", env = { "A=1" } }
    local r = H.step(st, "work").result
    assert.are.equal(3, r.status)
    assert.are.equal("text\n/tmp\n1\n", r.stdout)
    assert.are.equal("oops\n", r.stderr)
  end)

  it("raises if the program cannot be started", function()
    local eng = H.new_engine()
    local ok, err
    eng:register(H.one_step("nosuch", { execute = function()
      ok, err = pcall(mend.exec, { "/nonexistent/mend-no-such-program" })
      return ok
    end }))
    local id = eng:start("nosuch", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.is_false(ok)
    assert.is_not_nil(err)
  end)
end)

describe("a step's timeout", function()
  after_each(H.cleanup)

  it("stops a CPU-bound step that never yields, and the run fails over it", function()
    local eng = H.new_engine()
    local escaped, undone = false, 0
    eng:register {
      name = "spin",
      steps = {
        { name = "prepare", execute = function() return "ready" end,
          compensate = function() undone = undone + 1 end },
        { name = "work",
          timeout = 0.05,
          retry = { max_attempts = 1 },
          execute = function()
            -- `while true do end`, bounded by wall time only so that a broken engine fails
            -- this spec instead of hanging the suite
            local t0 = os.clock()
            while os.clock() - t0 < 20 do end
            escaped = true
            return "not stopped"
          end },
      },
    }
    local w0 = H.wall()
    local id = eng:start("spin", {})
    eng:run()
    assert.is_false(escaped)
    assert.is_true(H.wall() - w0 < 10)
    local st = eng:status(id)
    local s = H.step(st, "work")
    assert.are.equal("failed", s.status)
    assert.are.equal(1, s.attempts)
    local errs = {}
    for _, h in ipairs(eng:history(id)) do
      if h.step == "work" and h.error then errs[#errs + 1] = h.error end
    end
    assert.is_true(#errs > 0)
    assert.matches("timeout", errs[#errs])
    assert.are.equal(1, undone)
    assert.are.equal("compensated", H.step(st, "prepare").status)
    -- a timeout is retryable, so its one allowed attempt is exhausted: the contract sends such
    -- a run to the dead-letter queue after compensating
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("attempts_exhausted", H.dlq_entry(eng, id).reason)
  end)

  it("fails a step waiting past its timeout with a retryable timeout error", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register(H.one_step("slow", {
      timeout = 1,
      retry = { max_attempts = 3, initial = 2, jitter = 0 },
      execute = function()
        calls = calls + 1
        if calls == 1 then mend.sleep(10) end
        return calls
      end,
    }))
    local t0 = eng:now()
    local id = eng:start("slow", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(2, calls)
    assert.are.equal(2, H.step(st, "work").attempts)
    local waits = H.events(eng, id, { event = "step", step = "work", to = "retry_wait" })
    assert.are.equal(1, #waits)
    assert.matches("timeout", waits[1].error)
    assert.are.equal(2, waits[1].delay)
    -- 1 s until the timeout, 2 s of backoff
    assert.near(3, eng:now() - t0, 1e-3)
  end)
end)

-- Whatever way an attempt ends, its coroutine is closed (to-be-closed variables once each),
-- and the next attempt starts with nothing of it.
describe("an attempt's coroutine", function()
  after_each(H.cleanup)

  it("closes its to-be-closed variables however the attempt ends, and hands nothing on", function()
    local eng = H.new_engine()
    local closed, seen = {}, {}
    local function guard(ctx)
      return setmetatable({}, { __close = function()
        closed[#closed + 1] = ctx.run_id .. " " .. ctx.step .. " " .. ctx.attempt
      end })
    end
    eng:register {
      name = "hygiene",
      steps = {
        { name = "fails_once", retry = { max_attempts = 2, initial = 1, jitter = 0 },
          execute = function(ctx)
            local g <close> = guard(ctx)
            if ctx.attempt == 1 then error(mend.retryable("first try fails")) end
            return "ok"
          end },
        { name = "nested", execute = function(ctx)
            local g <close> = guard(ctx)
            -- a coroutine of its own inside the step, left suspended
            local inner = coroutine.create(function() coroutine.yield(1); return 2 end)
            local ok, v = coroutine.resume(inner)
            assert(ok and v == 1)
            mend.sleep(1)   -- the step's own coroutine yields to the engine and comes back
            seen[#seen + 1] = ctx.run_id
            return coroutine.status(inner)
          end },
        { name = "times_out", timeout = 1, retry = { max_attempts = 2, initial = 1, jitter = 0 },
          execute = function(ctx)
            local g <close> = guard(ctx)
            if ctx.attempt == 1 then mend.sleep(10) end   -- stopped by its timeout, suspended
            return ctx.attempt
          end },
      },
    }
    local ids = {}
    for i = 1, 3 do ids[i] = eng:start("hygiene", { i = i }) end
    eng:run()
    for _, id in ipairs(ids) do
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal("suspended", H.step(st, "nested").result)
      assert.are.equal(2, H.step(st, "times_out").result)
      assert.are.equal(2, H.step(st, "times_out").attempts)
    end
    -- every attempt closed its variable: the failed one, the one stopped while suspended, and
    -- the ones that returned; once each
    local count = {}
    for _, c in ipairs(closed) do count[c] = (count[c] or 0) + 1 end
    for _, id in ipairs(ids) do
      for _, attempt in ipairs { "fails_once 1", "fails_once 2", "nested 1", "times_out 1",
                                 "times_out 2" } do
        assert.are.equal(1, count[id .. " " .. attempt], id .. " " .. attempt)
      end
    end
    assert.are.equal(15, #closed)
    -- a step's coroutine is found by mend.sleep in every attempt: each nested step came back
    assert.are.equal(3, #seen)
  end)
end)

describe("mend errors", function()
  it("carry their kind, message and fields", function()
    local r = mend.retryable("overloaded", { retry_after = 2 })
    assert.are.equal("retryable", r.kind)
    assert.are.equal("overloaded", r.message)
    assert.are.equal(2, r.retry_after)
    assert.are.equal("retryable: overloaded", tostring(r))
    assert.are.equal("retryable", mend.is_error(r))

    local f = mend.fatal("card declined")
    assert.are.equal("fatal", f.kind)
    assert.are.equal("fatal: card declined", tostring(f))

    local c = mend.compensable("half shipped", { severity = 2 })
    assert.are.equal("compensable", c.kind)
    assert.are.equal(2, c.severity)

    assert.is_nil(mend.is_error("boom"))
    assert.is_nil(mend.is_error(42))
  end)

  it("refuse an option they do not know or a value they cannot use, naming it", function()
    local function refusal(f, ...)
      local ok, err = pcall(f, ...)
      assert.is_false(ok)
      return err
    end
    -- a misspelt retry_after would otherwise drop the service's advice without a word
    assert.matches("retry_afer is not an option: retry_after is the only one",
      refusal(mend.retryable, "busy", { retry_afer = 5 }), 1, true)
    assert.matches("retry_after must be a number >= 0",
      refusal(mend.retryable, "busy", { retry_after = 0 / 0 }), 1, true)
    assert.matches("sevrity is not an option: severity is the only one",
      refusal(mend.compensable, "half", { sevrity = 2 }), 1, true)
    assert.matches("1 is not an option: severity is the only one",
      refusal(mend.compensable, "half", { 2 }), 1, true)
    assert.are.equal(3, mend.retryable("busy", { retry_after = 3 }).retry_after)
    assert.are.equal(2, mend.compensable("half", { severity = 2 }).severity)
    assert.are.equal("retryable", mend.retryable("busy", {}).kind)
  end)

  it("keep their kind when raised and caught", function()
    local ok, e = pcall(error, mend.fatal("no"))
    assert.is_false(ok)
    assert.are.equal("fatal", mend.is_error(e))
    local ok2, e2 = pcall(function() error(e) end)
    assert.is_false(ok2)
    assert.are.equal("fatal", mend.is_error(e2))
    assert.are.equal("no", e2.message)
  end)
end)

describe("mend.json", function()
  it("round-trips JSON-compatible values and refuses functions", function()
    local v = { a = 1, b = { 1, 2, 3 }, c = "x", d = true }
    assert.are.same(v, mend.json.decode(mend.json.encode(v)))
    assert.has_error(function() mend.json.encode({ f = function() end }) end)
  end)
end)

describe("the engine's log", function()
  after_each(H.cleanup)

  local flaky = {
    name = "flaky",
    retry = { initial = 0.1, jitter = 0 },
    steps = { { name = "call", execute = function(ctx)
      ctx:log("attempt %d", ctx.attempt)
      if ctx.attempt == 1 then error(mend.retryable("busy")) end
      return true
    end } },
  }

  local function levels_logged(level)
    local seen = {}
    local eng = H.new_engine({ log_level = level, log = function(rec)
      seen[#seen + 1] = rec.level .. " " .. rec.event .. " " .. rec.message
    end })
    eng:register(flaky)
    eng:start("flaky", {})
    eng:run()
    return table.concat(seen, "\n")
  end

  it("gives every transition at info, the default", function()
    local all = levels_logged(nil)
    assert.truthy(all:find("info step pending -> running", 1, true), all)
    assert.truthy(all:find("info log attempt 2", 1, true), all)
    assert.truthy(all:find("warn step running -> retry_wait: retryable: busy", 1, true), all)
  end)

  it("gives only failures at warn", function()
    local warn = levels_logged("warn")
    assert.are.equal("warn step running -> retry_wait: retryable: busy", warn)
  end)

  it("refuses a level it does not know, naming the choices", function()
    assert.has_error(function() H.new_engine({ log_level = "loud" }) end,
      'mend.engine: log_level must be "debug", "info", "warn" or "error", got "loud"')
  end)
end)

describe("mend's own threads (thread_cpus)", function()
  after_each(H.cleanup)

  local function cpus_allowed(status_path)
    local f = assert(io.open(status_path))
    local list = f:read("a"):match("Cpus_allowed_list:%s*([^\n]*)")
    f:close()
    return list
  end

  it("refuses a list it cannot use, naming the option", function()
    assert.has_error(function() H.new_engine({ thread_cpus = {} }) end,
      "thread_cpus is empty: name the CPUs mend's threads may run on, or leave it unset")
    assert.has_error(function() H.new_engine({ thread_cpus = "two" }) end,
      'thread_cpus: "two" is not a list of CPUs such as "1" or "0,2-3" (numbers below 1024)')
    assert.has_error(function() H.new_engine({ thread_cpus = { 1.5 } }) end,
      'mend.engine: thread_cpus must be a list of CPU numbers or a string such as "0,2-3"')
    assert.has_error(function() H.new_engine({ thread_cpus = true }) end,
      'mend.engine: thread_cpus must be a list of CPU numbers or a string such as "0,2-3"')
    local ok, err = pcall(H.new_engine, { thread_cpus = 1023 })
    assert.is_false(ok)
    assert.matches("^thread_cpus: CPU 1023 is not one this process may run on %(it may use ", err)
  end)

  -- A list is joined as the engine is made: one as long as a large machine's (or a host's
  -- allow-list) must not take a slot of Lua's stack each. Run in a plain lua5.4, whose stack
  -- holds only what a C function is promised.
  it("takes a long list, as it takes a long http_allow", function()
    local script = H.write_file(H.tmp_dir(), "long.lua", [[
local mend = require "mend"
local cpus, hosts = {}, {}
for i = 1, 1000 do cpus[i] = 0; hosts[i] = "h" .. i .. ".example" end
local eng = mend.engine { thread_cpus = cpus, http_allow = hosts }
eng:close()
print("made")
]])
    local p = io.popen("timeout 60 lua5.4 " .. script .. " 2>&1")
    local out = p:read("a")
    local ok = p:close()
    assert.is_true(ok, out)
    assert.are.equal("made\n", out)
  end)

  it("starts its commit thread on the CPUs given, as a string or a list", function()
    -- the last CPU this process may use: on a machine of two or more, fewer CPUs than the
    -- thread would inherit from the one that makes the engine
    local last = tonumber(cpus_allowed("/proc/self/status"):match("(%d+)$"))
    for _, given in ipairs({ tostring(last), { last } }) do
      H.new_engine({ clock = "real", thread_cpus = given })
      -- the thread names itself as it starts: looked for until it has
      local found
      for _ = 1, 500 do
        for _, tid in ipairs(mend.listdir("/proc/self/task")) do
          local f = io.open("/proc/self/task/" .. tid .. "/comm")
          if f and f:read("l") == "mend-writer" then
            found = cpus_allowed("/proc/self/task/" .. tid .. "/status")
          end
          if f then f:close() end
        end
        if found then break end
        os.execute("sleep 0.01")
      end
      assert.are.equal(tostring(last), found)
      H.cleanup()
    end
  end)
end)

describe("a step's code holding its own engine", function()
  after_each(H.cleanup)

  -- A step that calls eng[method] on the engine running it, and the answer it got.
  local function calling(eng, method, ...)
    local args, got = table.pack(...), {}
    eng:register { name = "inside", steps = {
      { name = "a", execute = function(ctx)
          local a = {}
          for i = 1, args.n do a[i] = args[i] == "SELF" and ctx.run_id or args[i] end
          got.ok, got.err = pcall(eng[method], eng, table.unpack(a, 1, args.n))
          return 1
        end },
      { name = "b", execute = function() return 2 end } } }
    return got
  end

  -- Each of these pulled the running coroutine from under itself: a segfault (cancel of its
  -- own run, close) or a loop that never returned (run).
  for _, case in ipairs {
    { "run", {}, "run: called from a step's code" },
    { "recover", {}, "recover: called from a step's code" },
    { "close", {}, "close: called from a step's code" },
    { "cancel", { "SELF" }, "cannot be cancelled from its own code" },
  } do
    it("is refused " .. case[1] .. ", and the run goes on", function()
      local eng = H.new_engine()
      local got = calling(eng, case[1], table.unpack(case[2]))
      local id = eng:start("inside", {})
      eng:run()
      assert.is_false(got.ok)
      assert.truthy(tostring(got.err):find(case[3], 1, true), tostring(got.err))
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(2, st.steps[2].result)
    end)
  end

  -- A server over the engine (mend.serve, in the mend program), run from inside a run's code:
  -- libuv's loop would turn inside itself.
  it("is refused server:run(), and the run goes on", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "jobs.db")
    local script = H.write_file(dir, "serve.lua", table.concat({
      ("eng = require('mend').engine{ db = %q, clock = 'virtual' }"):format(db),
      "srv = require('mend.serve').listen(eng, { address = '127.0.0.1:0' })",
      "got = {}",
      "eng:register { name = 'inside', steps = { { name = 'a', execute = function() got.ok, got.err = pcall(srv.run, srv) return 1 end }, { name = 'b', execute = function() return 2 end } } }",
      "id = eng:start('inside', {})",
      "eng:run()",
      "print('got', got.ok, got.err)",
      "print('status', eng:status(id).status)",
      "srv:close()",
      "eng:close()",
    }, "\n") .. "\n")
    local p = io.popen(("timeout 20 %s repl < %s 2>&1"):format(os.getenv("MEND_BIN"), script))
    local out = p:read("a")
    p:close()
    assert.matches("\ngot\tfalse\trun: called from a step's code", "\n" .. out)
    assert.matches("\nstatus\tsucceeded\n", "\n" .. out)
  end)

  -- A workflow file's top level runs in no run, but inside the engine as much: an engine in
  -- the host's state that the file reaches through a global was closed under the load (a
  -- segfault), or driven from inside it (other runs' code ran in the middle of the load).
  it("is refused close and run from a workflow file's code as it loads", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "jobs.db")
    local closing = H.write_file(dir, "closing.lua", "eng:close()\nreturn { name = 'c', steps = {} }\n")
    local driving = H.write_file(dir, "driving.lua", "eng:run()\nreturn { name = 'd', steps = {} }\n")
    local script = H.write_file(dir, "load.lua", table.concat({
      ("eng = require('mend').engine{ db = %q, clock = 'virtual' }"):format(db),
      "eng:register { name = 'other', steps = { { name = 'a', execute = function() return 1 end } } }",
      "id = eng:start('other', {})",
      ("print('close', pcall(eng.load, eng, %q))"):format(closing),
      ("print('run', pcall(eng.load, eng, %q))"):format(driving),
      "print('before', eng:status(id).status)",
      "eng:run()",
      "print('status', eng:status(id).status)",
      "eng:close()",
    }, "\n") .. "\n")
    local p = io.popen(("timeout 20 lua5.4 %s 2>&1"):format(script))   -- its globals are the file's
    local out = p:read("a")
    p:close()
    assert.matches("\nclose\tfalse\t[^\n]*close: called from a workflow file's code as it loads",
                   "\n" .. out)
    assert.matches("\nrun\tfalse\t[^\n]*run: called from a workflow file's code as it loads",
                   "\n" .. out)
    assert.matches("\nbefore\trunning\n", "\n" .. out)
    assert.matches("\nstatus\tsucceeded\n", "\n" .. out)
  end)

  -- A step's to-be-closed variables are closed by the engine after an error: their handlers
  -- are the step's code too (cancel and close segfaulted from there).
  for _, what in ipairs { "cancel", "run", "close" } do
    it("is refused " .. what .. " from a <close> handler of its step's code", function()
      local eng = H.new_engine()
      local got = {}
      eng:register { name = "closing", steps = {
        { name = "a", retry = { max_attempts = 1 }, execute = function(ctx)
            local guard <close> = setmetatable({}, { __close = function()
              got.ok, got.err = pcall(eng[what], eng, what == "cancel" and ctx.run_id or nil)
            end })
            error("boom")
          end } } }
      local id = eng:start("closing", {})
      eng:run()
      assert.is_false(got.ok)
      assert.truthy(tostring(got.err):find(what == "cancel" and "cannot be cancelled from its own code"
                                           or what .. ": called from a <close> handler of a step's code", 1, true),
                    tostring(got.err))
      assert.are.equal("failed", eng:status(id).status)
    end)
  end

  it("names a compensation's code in the refusal", function()
    local eng = H.new_engine()
    local got = {}
    eng:register { name = "undoing", steps = {
      { name = "a", execute = function() return 1 end,
        compensate = function() got.ok, got.err = pcall(eng.run, eng) end },
      { name = "b", execute = function() error(mend.fatal("no")) end } } }
    local id = eng:start("undoing", {})
    eng:run()
    assert.is_false(got.ok)
    assert.truthy(tostring(got.err):find("run: called from a step's compensate while", 1, true),
                  tostring(got.err))
    assert.are.equal("compensated", eng:status(id).status)
  end)

  -- The __tostring of an error value the step raised runs as the engine reads the error: run
  -- from there never returned, close segfaulted, cancel broke the engine.
  for _, what in ipairs { "cancel", "run", "close" } do
    it("is refused " .. what .. " from the __tostring of an error its step raised", function()
      local eng = H.new_engine()
      local got = {}
      eng:register { name = "raising", steps = {
        { name = "a", retry = { max_attempts = 1 }, execute = function(ctx)
            error(setmetatable({}, { __tostring = function()
              got.ok, got.err = pcall(eng[what], eng, what == "cancel" and ctx.run_id or nil)
              return "boom"
            end }))
          end } } }
      local id = eng:start("raising", {})
      eng:run()
      assert.is_false(got.ok)
      assert.truthy(tostring(got.err):find(what == "cancel" and "cannot be cancelled from its own code"
                                           or what .. ": called from an error's __tostring", 1, true),
                    tostring(got.err))
      local st = eng:status(id)
      assert.are.equal("failed", st.status)
      assert.are.equal("error: boom", st.steps[1].error)
    end)
  end

  -- when, idempotency_key, a map's list function and a child's input are the run's code too,
  -- though they run outside its attempt: close segfaulted from each, cancel of its own run
  -- broke the engine ("illegal run transition") or cancelled it mid-decision, and run drove
  -- the engine from inside its own run.
  local function deciding(eng, which, method)
    local got = {}
    local function poke(ctx)
      got.ok, got.err = pcall(eng[method], eng, method == "cancel" and ctx.run_id or nil)
    end
    local first = { name = "a", execute = function() return 1 end }
    if which == "when" then
      first.when = function(ctx) poke(ctx) return true end
    elseif which == "idempotency_key" then
      first.idempotency_key = function(ctx) poke(ctx) return "k" end
    elseif which == "map" then
      first = { name = "a", map = function(ctx) poke(ctx) return { 1, 2 } end,
                step = { execute = function() return 1 end } }
    else
      eng:register { name = "kid", steps = { { name = "k", execute = function() return 1 end } } }
      first = { name = "a", child = "kid", input = function(ctx) poke(ctx) return {} end }
    end
    eng:register { name = "deciding", steps = { first,
      { name = "b", execute = function() return 2 end } } }
    return got
  end

  -- The refusal names the code that was running (it said "a step's code" for each).
  local named = { when = "a when function", idempotency_key = "an idempotency_key function",
                  map = "a map's list function", input = "a child step's input function" }
  for _, which in ipairs { "when", "idempotency_key", "map", "input" } do
    for _, case in ipairs {
      { "run", "run: called from " .. named[which] .. " while" },
      { "close", "close: called from " .. named[which] .. " while" },
      { "cancel", "cannot be cancelled from its own code" },
    } do
      it("is refused " .. case[1] .. " from its " .. which .. " function, and the run goes on", function()
        local eng = H.new_engine()
        local got = deciding(eng, which, case[1])
        local id = eng:start("deciding", {})
        eng:run()
        assert.is_false(got.ok)
        assert.truthy(tostring(got.err):find(case[2], 1, true), tostring(got.err))
        local st = eng:status(id)
        assert.are.equal("succeeded", st.status)
        assert.are.equal(2, st.steps[2].result)
      end)
    end
  end

  it("may cancel another run and start one", function()
    local eng = H.new_engine()
    eng:register { name = "sleeper", steps = { { name = "s", execute = function()
      mend.sleep(60)
      return 1
    end } } }
    local other = eng:start("sleeper", {})
    local started
    eng:register { name = "boss", steps = { { name = "a", execute = function()
      assert(eng:cancel(other))
      started = eng:start("sleeper", {})
      return 1
    end } } }
    local id = eng:start("boss", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("failed", eng:status(other).status)
    assert.are.equal("cancelled", eng:status(other).reason)
    assert.are.equal("succeeded", eng:status(started).status)
  end)
end)

-- eng:run() left by a Lua error of the caller's own state (a panic of the engine's, made by the
-- "execute:N:panic" failpoint) must leave nothing of run's going: its clock mode left on, a
-- later advance(1) jumped to the next timer of any run (here 440 s on).
describe("eng:run() left by an error of the state it shares with its caller", function()
  after_each(H.cleanup)

  it("puts back its own clock mode: a later advance(1) moves the clock by 1 s", function()
    local dir = H.tmp_dir()
    local script = H.write_file(dir, "host.lua", [==[
      local mend = require "mend"
      local eng = mend.engine{ clock = "virtual", db = arg[1] }
      eng:register{ name = "a", steps = { { name = "s", retry = { max_attempts = 3, initial = 60, jitter = 0 },
        execute = function(ctx) if ctx.attempt == 1 then error(mend.retryable("busy")) end return 1 end } } }
      eng:register{ name = "c", steps = { { name = "nap", sleep = 500 } } }
      local t0 = eng:now()
      eng:start("c", {})
      eng:start("a", {})
      local ok, err = pcall(eng.run, eng)   -- the second execute panics, at +60 s
      print("run", ok, err)
      local t1 = eng:now() - t0
      eng:advance(1)
      print("moved", eng:now() - t0 - t1)
    ]==])
    local rc, out = H.shell(("MEND_FAILPOINT=execute:2:panic lua5.4 %s %s")
      :format(H.quote(script), H.quote(H.new_db(dir, "b.db"))))
    assert.are.equal(0, rc, out)
    assert.matches("run\tfalse\tfailpoint execute", out)
    assert.matches("moved\t1%.0", out)
  end)
end)
