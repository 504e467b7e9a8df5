-- Workflows that branch (issue 21): steps skipped by their when(ctx), and parallel groups whose
-- branches run at the same time, each with its own policy, and are compensated in the reverse
-- order of their completion. Through the Lua API on the virtual clock, where times are exact;
-- then a real `mend worker` killed in the middle of a group.
local H = require "spec.helper"
local mend = require "mend"
local json = mend.json

local function at(eng, id, t0, filter)
  local out = {}
  for _, h in ipairs(H.events(eng, id, filter)) do out[#out + 1] = h.at - t0 end
  return out
end

-- The steps that began compensating, in order.
local function compensation_order(eng, id)
  local out = {}
  for _, h in ipairs(H.events(eng, id, { event = "step", to = "compensating" })) do
    out[#out + 1] = h.step
  end
  return out
end

local function sleeper(seconds, result, undone)
  return function(ctx)
    ctx:sleep(seconds)
    return result
  end, undone and function(ctx) undone[#undone + 1] = ctx.step end or nil
end

describe("a parallel group", function()
  after_each(H.cleanup)

  it("runs its branches at the same time: two 2 s branches end at +2 s, not +4 s", function()
    local eng = H.new_engine()
    local ex1, _ = sleeper(2, { n = 1 })
    local ex2, _ = sleeper(2, "two")
    eng:register{ name = "p", steps = {
      { name = "prepare", parallel = {
        { name = "stock", execute = ex1 },
        { name = "label", execute = ex2 },
      } },
      { name = "ship", execute = function(ctx)
          return { n = ctx.results.prepare.stock.n, label = ctx.results.prepare.label }
        end },
    } }
    local t0 = eng:now()
    local id = eng:start("p", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ 2 }, at(eng, id, t0, { step = "prepare/stock", to = "succeeded" }))
    assert.are.same({ 2 }, at(eng, id, t0, { step = "prepare/label", to = "succeeded" }))
    assert.are.same({ 2 }, at(eng, id, t0, { event = "run", to = "succeeded" }))
    -- the group's result is a table by branch name, and later steps read it from ctx.results
    assert.are.same({ stock = { n = 1 }, label = "two" }, H.step(st, "prepare").result)
    assert.are.same({ n = 1, label = "two" }, H.step(st, "ship").result)
    -- each branch has its own idempotency key
    local keys = {}
    local eng2 = H.new_engine()
    eng2:register{ name = "k", steps = { { name = "g", parallel = {
      { name = "a", execute = function(ctx) keys[#keys + 1] = ctx.idempotency_key end },
      { name = "b", execute = function(ctx) keys[#keys + 1] = ctx.idempotency_key end },
    } } } }
    local id2 = eng2:start("k", {})
    eng2:run()
    table.sort(keys)
    assert.are.same({ id2 .. "/g/a", id2 .. "/g/b" }, keys)
  end)

  it("never has more than max_concurrency branches going at once", function()
    local eng = H.new_engine()
    local branches = {}
    for k = 1, 5 do branches[k] = { name = "b" .. k, execute = (sleeper(1, k)) } end
    eng:register{ name = "c", steps = { { name = "g", parallel = branches, max_concurrency = 2 } } }
    local t0 = eng:now()
    local id = eng:start("c", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local going, most = 0, 0
    for _, h in ipairs(H.events(eng, id, { event = "step" })) do
      if h.step:match("^g/") and h.to == "running" then going = going + 1 end
      if h.step:match("^g/") and h.to == "succeeded" then going = going - 1 end
      most = math.max(most, going)
    end
    assert.are.equal(2, most)
    -- five 1 s branches two at a time: three rounds
    assert.are.same({ 3 }, at(eng, id, t0, { step = "g", to = "succeeded" }))
  end)

  it("stops the other branches' retries when one fails for good, lets the attempt in flight end,"
     .. " and compensates what succeeded latest completed first", function()
    local eng = H.new_engine()
    local undone = {}
    local function undo(ctx) undone[#undone + 1] = ctx.step end
    eng:register{ name = "f", steps = {
      { name = "first", execute = function() return 1 end, compensate = undo },
      { name = "prepare", parallel = {
        { name = "early", execute = (sleeper(1, "e")), compensate = undo },
        { name = "late", execute = (sleeper(3, "l")), compensate = undo },
        { name = "flaky", retry = { max_attempts = 100, initial = 0.1, jitter = 0 },
          execute = function(ctx)
            ctx:sleep(0.7)
            error(mend.retryable("busy"))
          end, compensate = undo },
        { name = "broken", execute = function(ctx)
            ctx:sleep(2)
            error(mend.fatal("no stock"))
          end },
      } },
      { name = "never", execute = function() error("must not run") end },
    } }
    local t0 = eng:now()
    local id = eng:start("f", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.matches("no stock", st.error)
    -- `late` was in flight at +2 s: it ended at +3 s, was recorded, and is undone first
    assert.are.same({ 3 }, at(eng, id, t0, { step = "prepare/late", to = "succeeded" }))
    assert.are.same({ "prepare/late", "prepare/early", "first" }, compensation_order(eng, id))
    assert.are.same({ "prepare/late", "prepare/early", "first" }, undone)
    -- flaky's third attempt was in flight at +2 s and ended there; no fourth began
    for _, t in ipairs(at(eng, id, t0, { step = "prepare/flaky", to = "running" })) do
      assert.is_true(t < 2, "an attempt of flaky began at +" .. t)
    end
    local flaky = H.step(st, "prepare/flaky")
    assert.are.equal(3, flaky.attempts)
    assert.are.equal("failed", flaky.status)
    assert.are.equal("failed", H.step(st, "prepare").status)
    assert.are.equal("pending", H.step(st, "never").status)
  end)

  it("puts a branch waiting for its retry back to pending when another fails for good", function()
    local eng = H.new_engine()
    eng:register{ name = "w", steps = {
      { name = "ok", execute = function() return 1 end, compensate = function() end },
      { name = "g", parallel = {
        { name = "slow_retry", retry = { max_attempts = 5, initial = 60, jitter = 0 },
          execute = function() error(mend.retryable("later")) end },
        { name = "bad", execute = function(ctx) ctx:sleep(1); error(mend.fatal("bad")) end },
      } },
    } }
    local t0 = eng:now()
    local id = eng:start("w", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.same({ "pending->running", "running->retry_wait", "retry_wait->pending" },
      H.transitions(eng, id, "g/slow_retry"))
    local stopped = H.events(eng, id, { step = "g/slow_retry", to = "pending" })[1]
    assert.matches("another branch failed for good", stopped.detail)
    assert.is_true(eng:now() - t0 < 60, "the retry was waited for")
  end)

  it("is undone as a whole when a later step fails: the group compensated, its branches"
     .. " latest first", function()
    local eng = H.new_engine()
    local undone = {}
    local function undo(ctx) undone[#undone + 1] = ctx.step end
    eng:register{ name = "later", steps = {
      { name = "g", parallel = {
        { name = "slow", execute = (sleeper(2, 1)), compensate = undo },
        { name = "none", execute = (sleeper(3, 2)) },
        { name = "quick", execute = (sleeper(1, 3)), compensate = undo },
      } },
      { name = "boom", execute = function() error(mend.fatal("boom")) end },
    } }
    local id = eng:start("later", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.same({ "g/slow", "g/quick" }, undone)
    assert.are.same({ "pending->running", "running->succeeded", "succeeded->compensating",
                      "compensating->compensated" }, H.transitions(eng, id, "g"))
    assert.are.equal("succeeded", H.step(st, "g/none").status)   -- nothing to undo
    assert.are.equal(1, #H.events(eng, id, { event = "skip_compensate", step = "g/none" }))
  end)

  it("gives each branch its own timeout, retries and breaker", function()
    local eng = H.new_engine()
    local t0
    eng:register{ name = "own", steps = {
      { name = "g", parallel = {
        { name = "slow", timeout = 1, retry = { max_attempts = 3, initial = 0.5, jitter = 0 },
          execute = function(ctx)
            if ctx.attempt < 3 then ctx:sleep(5) end   -- cut at 1 s, twice
            return ctx.attempt
          end },
        { name = "calm", execute = function(ctx) ctx:sleep(2); return "ok" end },
      } },
    } }
    t0 = eng:now()
    local id = eng:start("own", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ slow = 3, calm = "ok" }, H.step(st, "g").result)
    local timeouts = H.events(eng, id, { step = "g/slow", to = "retry_wait" })
    assert.are.equal(2, #timeouts)
    assert.matches("^timeout", timeouts[1].error)
    assert.are.same({ 2 }, at(eng, id, t0, { step = "g/calm", to = "succeeded" }))
    -- the breakers are the branches' own, keyed by their names
    assert.is_truthy(H.breaker(eng, "g/slow"))
    assert.is_truthy(H.breaker(eng, "g/calm"))
  end)

  it("takes a branch that waits for an event, whose payload is the branch's result", function()
    local eng = H.new_engine()
    eng:register{ name = "ev", steps = {
      { name = "g", parallel = {
        { name = "paid", wait_for = "payment", timeout = 3600 },
        { name = "packed", execute = (sleeper(5, "box")) },
      } },
    } }
    local id = eng:start("ev", {})
    eng:advance(10)
    local st = eng:status(id)
    assert.are.equal("waiting", H.step(st, "g/paid").status)
    assert.are.equal("succeeded", H.step(st, "g/packed").status)
    eng:signal(id, "payment", { amount = 12 })
    eng:run()
    st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ paid = { amount = 12 }, packed = "box" }, H.step(st, "g").result)
  end)

  it("is cancelled as a whole: branches in flight let go, those that succeeded compensated", function()
    local eng = H.new_engine()
    local undone = {}
    eng:register{ name = "cx", steps = {
      { name = "g", parallel = {
        { name = "quick", execute = (sleeper(1, 1)), compensate = function() undone[#undone + 1] = "quick" end },
        { name = "slow", execute = (sleeper(100, 2)), compensate = function() undone[#undone + 1] = "slow" end },
      } },
    } }
    local id = eng:start("cx", {})
    eng:advance(5)
    eng:cancel(id)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.same({ "quick" }, undone)
    assert.are.equal("failed", H.step(st, "g/slow").status)
  end)
end)

describe("a step with when", function()
  after_each(H.cleanup)

  it("is skipped when it says no: recorded with the reason, absent from ctx.results, never"
     .. " compensated", function()
    local eng = H.new_engine()
    local undone, seen = {}, {}
    eng:register{ name = "s", steps = {
      { name = "reserve", execute = function() return "r" end,
        compensate = function() undone[#undone + 1] = "reserve" end },
      { name = "express", when = function(ctx) return ctx.input.express end,
        execute = function() return "fast" end,
        compensate = function() undone[#undone + 1] = "express" end },
      { name = "charge", execute = function(ctx)
          seen.express = ctx.results.express
          seen.reserve = ctx.results.reserve
          error(mend.fatal("declined"))
        end },
    } }
    local id = eng:start("s", { express = false })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("skipped", H.step(st, "express").status)
    assert.are.same({ "pending->skipped" }, H.transitions(eng, id, "express"))
    assert.are.equal("when(ctx) returned false",
      H.events(eng, id, { step = "express", to = "skipped" })[1].detail)
    assert.is_nil(seen.express)
    assert.are.equal("r", seen.reserve)
    assert.are.same({ "reserve" }, undone)
    -- said yes, it runs, and the yes is in the history
    local id2 = eng:start("s", { express = true })
    eng:run()
    assert.are.equal("compensated", eng:status(id2).status)
    assert.are.equal(1, #H.events(eng, id2, { event = "when", step = "express" }))
    assert.are.same({ "reserve", "express", "reserve" }, undone)
  end)

  it("skips a whole group, its branches with it", function()
    local eng = H.new_engine()
    eng:register{ name = "sg", steps = {
      { name = "g", when = function() return false end, parallel = {
        { name = "a", execute = function() error("must not run") end },
      } },
      { name = "after", execute = function(ctx) return ctx.results.g == nil end },
    } }
    local id = eng:start("sg", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("skipped", H.step(st, "g").status)
    assert.are.equal("skipped", H.step(st, "g/a").status)
    assert.is_true(H.step(st, "after").result)
  end)

  it("skips a branch of a group, which leaves it out of the group's result", function()
    local eng = H.new_engine()
    eng:register{ name = "sb", steps = {
      { name = "g", parallel = {
        { name = "always", execute = function() return "a" end },
        { name = "gift", when = function(ctx) return ctx.input.gift end,
          execute = function() return "wrapped" end, compensate = function() error("never") end },
      } },
      { name = "boom", execute = function() error(mend.fatal("boom")) end },
    } }
    local id = eng:start("sb", { gift = false })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("skipped", H.step(st, "g/gift").status)
    assert.are.same({ always = "a" }, H.step(st, "g").result)
    assert.are.same({ "pending->skipped" }, H.transitions(eng, id, "g/gift"))
  end)

  it("is asked once: a restart does not ask again", function()
    local asked = 0
    local def = { name = "once", steps = {
      { name = "gated", when = function() asked = asked + 1; return true end, sleep = 600,
        execute = function() return "done" end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("once", {})
    eng:advance(100)
    assert.are.equal("sleeping", H.step(eng:status(id), "gated").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.equal(1, asked)
  end)

  it("fails its step when it raises, as any error of the step's code", function()
    local eng = H.new_engine()
    eng:register{ name = "bad", steps = {
      { name = "x", when = function() error("no idea") end, execute = function() return 1 end },
    } }
    local id = eng:start("bad", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("failed", st.status)
    assert.matches("when: .*no idea", H.step(st, "x").error)
  end)
end)

describe("a group after a restart", function()
  after_each(H.cleanup)

  it("resumes exactly: no branch that succeeded executes again; the compensation order holds",
     function()
    local runs = {}
    local undone = {}
    local function branch(name, seconds, fail)
      return { name = name, compensate = function(ctx) undone[#undone + 1] = ctx.step end,
        execute = function(ctx)
          runs[name] = (runs[name] or 0) + 1
          ctx:sleep(seconds)
          if fail and ctx.input.fail then error(mend.fatal("stop")) end
          return name
        end }
    end
    local def = { name = "rs", steps = {
      { name = "g", parallel = { branch("a", 1), branch("b", 3), branch("c", 5, true) } },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("rs", { fail = true })
    eng:advance(2)                               -- a succeeded; b and c in flight
    assert.are.equal("succeeded", H.step(eng:status(id), "g/a").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.same({ a = 1, b = 2, c = 2 }, runs)   -- b and c again (at least once), a not
    -- b ended after a (after the restart): undone first, then a
    assert.are.same({ "g/b", "g/a" }, compensation_order(eng2, id))
    assert.are.same({ "g/b", "g/a" }, undone)
  end)
end)

describe("a group whose branch failed for good before a restart", function()
  after_each(H.cleanup)

  it("executes again a branch found running (its call may have had its effect), then undoes it",
     function()
    local runs, undone = {}, {}
    local def = { name = "rf", steps = {
      { name = "g", parallel = {
        { name = "a", execute = function(ctx) ctx:sleep(1); error(mend.fatal("sold out")) end },
        { name = "b", compensate = function(ctx) undone[#undone + 1] = ctx.step end,
          execute = function(ctx)
            runs.b = (runs.b or 0) + 1
            ctx:sleep(5)
            return "b"
          end },
      } },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("rf", {})
    eng:advance(2)                               -- a failed for good; b's attempt in flight
    assert.are.equal("failed", H.step(eng:status(id), "g/a").status)
    assert.are.equal("running", H.step(eng:status(id), "g/b").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal(2, runs.b)                  -- executed again with its key, not marked failed
    assert.are.equal("compensated", H.step(st, "g/b").status)
    assert.are.same({ "g/b" }, undone)
  end)
end)

-- A group or map whose branch (item) failed for good and another in flight, as a crash leaves
-- it: the run ends as the branch failed, by the kind its row keeps beside the message.
describe("the kind of a branch's failure across a restart", function()
  after_each(H.cleanup)

  local function group_def(raise)
    return { name = "rk", steps = {
      { name = "g", parallel = {
        { name = "a", retry = { max_attempts = 1 },
          execute = function(ctx) ctx:sleep(1); error(raise("sold out")) end },
        { name = "b", execute = function(ctx) ctx:sleep(5); return "b" end },
      } },
    } }
  end

  local function crashed_with_failed(def, failed, opts)
    local eng, db = H.new_engine(opts)
    eng:register(def)
    local id = eng:start(def.name, { items = { { t = 1, bad = true }, { t = 5 } } })
    eng:advance(2)                               -- failed for good; the other's attempt in flight
    assert.are.equal("failed", H.step(eng:status(id), failed).status)
    H.close(eng)
    return db, id
  end

  local function row(db, id, name, column)
    return H.sql(db, ("SELECT %s FROM steps WHERE run_id = '%s' AND name = '%s'")
      :format(column, id, name))[1]
  end

  local function carried_on(db, def, id, opts)
    local eng2 = H.reopen(db, opts)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    return eng2:status(id)
  end

  it("is the kind its row keeps, whatever its message's text says", function()
    local def = group_def(mend.fatal)
    local db, id = crashed_with_failed(def, "g/a")
    assert.are.equal("fatal", row(db, id, "g/a", "error_kind"))
    -- a message that names no kind (as a person or another writer might leave it)
    H.sql(db, ("UPDATE steps SET error = 'sold out' WHERE run_id = '%s' AND name = 'g/a'"):format(id))
    local st = carried_on(db, def, id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("fatal", st.reason)
    assert.are.equal("sold out", st.error)
  end)

  -- what the same run comes to when nothing stops its worker
  local function uninterrupted(def, opts)
    local eng = H.new_engine(opts)
    eng:register(def)
    local id = eng:start(def.name, {})
    eng:run()
    return eng:status(id)
  end

  it("keeps a compensable branch's severity: 2 is compensated with an alert, 3 waits for a person",
     function()
    for _, case in ipairs({ { 2, "compensated", "severity_2" },
                            { 3, "needs_attention", "severity_3" } }) do
      local severity, want = case[1], { case[2], case[3] }
      local def = group_def(function(m) return mend.compensable(m, { severity = severity }) end)
      local before = uninterrupted(def)
      assert.are.same(want, { before.status, before.reason })
      local db, id = crashed_with_failed(def, "g/a")
      assert.are.equal("compensable", row(db, id, "g/a", "error_kind"))
      local st = carried_on(db, def, id)
      assert.are.same(want, { st.status, st.reason }, "severity " .. severity)
      assert.are.equal("compensable: sold out", st.error)
    end
  end)

  it("keeps a branch the engine stopped (its instruction budget) a workflow_error for a person",
     function()
    local opts = { instruction_budget = 100000 }
    local def = { name = "rw", steps = {
      { name = "g", parallel = {
        { name = "a", retry = { max_attempts = 1 },
          execute = function(ctx) ctx:sleep(1); while true do end end },
        { name = "b", execute = function(ctx) ctx:sleep(5); return "b" end },
      } },
    } }
    local before = uninterrupted(def, opts)
    assert.are.same({ "needs_attention", "workflow_error" }, { before.status, before.reason })
    local db, id = crashed_with_failed(def, "g/a", opts)
    local st = carried_on(db, def, id, opts)
    assert.are.same({ "needs_attention", "workflow_error" }, { st.status, st.reason })
    assert.matches("instruction budget", st.error)
    assert.are.equal(1, #H.sql(db, ("SELECT 1 FROM dlq WHERE run_id = '%s'"):format(id)))
  end)

  it("is kept stopped in the row of a map whose list the engine stopped", function()
    local opts = { instruction_budget = 100000 }
    local def = { name = "ml", steps = {
      { name = "m", map = function() while true do end end,
        step = { execute = function() return 1 end } } } }
    local eng, db = H.new_engine(opts)
    eng:register(def)
    local id = eng:start("ml", {})
    eng:run()
    assert.are.equal("workflow_error", eng:status(id).reason)
    assert.are.same({ "error 1" }, { row(db, id, "m", "error_kind || ' ' || error_stopped") })
  end)

  -- Two branches that failed for good, one compensable (compensated itself) and one not: the
  -- run's reason is the first's, and a restart during the compensation undoes each branch by
  -- its own kind, as it was going to.
  it("undoes each failed branch by its own kind, not by the run's reason", function()
    for _, case in ipairs({ { mend.compensable, mend.fatal, "compensable", "g/a" },
                            { mend.fatal, mend.compensable, "fatal", "g/b" } }) do
      local calls = {}
      local function undo(ctx)
        calls[#calls + 1] = ctx.step
        if ctx.step == "g/c" and #calls == 1 then error(mend.retryable("busy")) end
      end
      local def = { name = "two", steps = { { name = "g", parallel = {
        { name = "a", compensate = undo,
          execute = function(ctx) ctx:sleep(1); error(case[1]("a failed")) end },
        { name = "b", compensate = undo,
          execute = function(ctx) ctx:sleep(2); error(case[2]("b failed")) end },
        { name = "c", compensate = undo,
          compensate_retry = { max_attempts = 2, initial = 10, max_delay = 10, jitter = 0 },
          execute = function(ctx) ctx:sleep(3); return "c" end },
      } } } }
      local want = { "g/c", "g/c", case[4] }
      local before = uninterrupted(def)
      assert.are.same({ "compensated", case[3] }, { before.status, before.reason })
      assert.are.same(want, calls)
      calls = {}
      local eng, db = H.new_engine()
      eng:register(def)
      local id = eng:start("two", {})
      eng:advance(5)                             -- c's compensation waits for its retry
      assert.are.same({ "g/c" }, calls)
      H.close(eng)
      local st = carried_on(db, def, id)
      assert.are.same({ "compensated", case[3] }, { st.status, st.reason })
      assert.are.same(want, calls, case[3])
      for _, name in ipairs({ "g/a", "g/b", "g/c" }) do
        assert.are.equal(H.step(before, name).status, H.step(st, name).status, name)
      end
    end
  end)

  it("ends a map whose item ran out of attempts in the dead-letter queue, as before the restart",
     function()
    local def = { name = "mk", steps = {
      { name = "charge", max_concurrency = 2, map = function(ctx) return ctx.input.items end,
        step = { retry = { max_attempts = 1 },
          execute = function(ctx, item)
            ctx:sleep(item.t)
            if item.bad then error(mend.retryable("declined")) end
            return "ok"
          end } },
    } }
    local db, id = crashed_with_failed(def, "charge/1")
    assert.are.equal("retryable", row(db, id, "charge/1", "error_kind"))
    H.sql(db, ("UPDATE steps SET error = 'declined' WHERE run_id = '%s' AND name = 'charge/1'")
      :format(id))
    local st = carried_on(db, def, id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("attempts_exhausted", st.reason)
  end)

  it("is read from the message once, when a store from before the kind had a column is opened",
     function()
    local def = group_def(mend.compensable)
    local db, id = crashed_with_failed(def, "g/a")
    local pg = H.is_pg(db)
    -- the store as mend wrote it before (SQLite schema 13, PostgreSQL schema 4)
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_kind")
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_severity")
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_stopped")
    if not pg then H.sql(db, "DROP VIEW history_named") end   -- it names the column (made again)
    H.sql(db, "ALTER TABLE history DROP COLUMN error_kind")
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 4 or 13))
    if not pg then   -- and without schema 20's inbox.who, which the migration adds again
      H.sql(db, "PRAGMA user_version = 13")
      H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    end
    local st = carried_on(db, def, id)
    assert.are.equal("compensable", row(db, id, "g/a", "error_kind"))
    assert.are.equal("compensated", st.status)
    assert.are.equal("compensable", st.reason)
  end)

  it("has its severity and stop filled from its run's reason, when a store from before they had "
     .. "columns is opened", function()
    local opts = { instruction_budget = 100000 }
    local sev2 = group_def(function(m) return mend.compensable(m, { severity = 2 }) end)
    local spin = { name = "rw", steps = { { name = "g", parallel = {
      { name = "a", execute = function(ctx) ctx:sleep(1); while true do end end },
      { name = "b", execute = function() return "b" end } } } } }
    local eng, db = H.new_engine(opts)
    eng:register(sev2)
    eng:register(spin)
    local a, b = eng:start("rk", {}), eng:start("rw", {})
    eng:run()
    assert.are.equal("severity_2", eng:status(a).reason)
    assert.are.equal("workflow_error", eng:status(b).reason)
    H.close(eng)
    local pg = H.is_pg(db)
    -- the store as mend wrote it before (SQLite schema 14, PostgreSQL schema 5)
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_severity")
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_stopped")
    if not pg then H.sql(db, "DROP VIEW history_named") end   -- it names the column (made again)
    H.sql(db, "ALTER TABLE history DROP COLUMN error_kind")
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 5 or 14))
    if not pg then   -- and without schema 20's inbox.who, which the migration adds again
      H.sql(db, "PRAGMA user_version = 14")
      H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    end
    H.reopen(db, opts)
    assert.are.same({ "2 0" }, { row(db, a, "g/a", "error_severity || ' ' || error_stopped") })
    assert.are.same({ "0 1" }, { row(db, b, "g/a", "error_severity || ' ' || error_stopped") })
    assert.are.same({ "0 0" }, { row(db, b, "g/b", "error_severity || ' ' || error_stopped") })
    -- history's rows before name no kind (their text does); history_named reads them
    local named = H.is_pg(db) and "history" or "history_named"
    assert.are.same({ "0" }, H.sql(db, ("SELECT count(*) FROM %s WHERE run_id = '%s' AND error_kind"
      .. " IS NOT NULL"):format(named, a)))
  end)
end)

describe("a group's waits after a restart", function()
  after_each(H.cleanup)

  it("keep their stored due times: a sleeping branch and one waiting for its retry", function()
    local calls = 0
    local def = { name = "wt", steps = {
      { name = "g", parallel = {
        { name = "nap", sleep = 600, execute = function(ctx) return ctx:now() end },
        { name = "again", retry = { initial = 300, max_delay = 300, jitter = 0, max_attempts = 2 },
          execute = function(ctx)
            calls = calls + 1
            if ctx.attempt == 1 then error(mend.retryable("later")) end
            return ctx:now()
          end },
      } },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("wt", {})
    eng:advance(100)
    local st = eng:status(id)
    assert.are.equal("sleeping", H.step(st, "g/nap").status)
    assert.are.equal("retry_wait", H.step(st, "g/again").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.is_true(math.abs(H.step(st, "g").result.nap - (t0 + 600)) < 1e-3)
    assert.is_true(math.abs(H.step(st, "g").result.again - (t0 + 300)) < 1e-3)
    assert.are.equal(2, calls)
  end)
end)

describe("a parallel group at load", function()
  after_each(H.cleanup)

  local function refused(def, message)
    local eng = H.new_engine()
    local ok, err = pcall(eng.register, eng, def)
    assert.is_false(ok)
    assert.matches(message, err, 1, true)
  end

  local function ex() return 1 end

  it("refuses what it cannot run, naming the step, the branch and the field", function()
    refused({ name = "x", steps = { { name = "g", parallel = {
      { name = "a", execute = ex }, { name = "a", execute = ex } } } } },
      'step "g": two branches are named "a"')
    refused({ name = "x", steps = { { name = "g", parallel = { { name = "a" } } } } },
      'step "g": branch "a": execute is missing')
    refused({ name = "x", steps = { { name = "g", parallel = { { execute = ex } } } } },
      'step "g": branch #1: name is missing')
    refused({ name = "x", steps = { { name = "g", max_concurrency = 0,
      parallel = { { name = "a", execute = ex } } } } },
      'step "g": max_concurrency must be a positive integer, got 0')
    refused({ name = "x", steps = { { name = "g", max_concurrency = 1.5,
      parallel = { { name = "a", execute = ex } } } } },
      'step "g": max_concurrency must be a positive integer, got 1.5')
    refused({ name = "x", steps = { { name = "g", max_concurrency = "2",
      parallel = { { name = "a", execute = ex } } } } },
      'step "g": max_concurrency must be a positive integer, got string')
    refused({ name = "x", steps = { { name = "g", parallel = {} } } },
      'step "g": parallel must be a non-empty list of steps')
    refused({ name = "x", steps = { { name = "g", parallel = { a = { name = "a", execute = ex } } } } },
      'step "g": parallel must be a non-empty list of steps')
    refused({ name = "x", steps = { { name = "g", execute = ex,
      parallel = { { name = "a", execute = ex } } } } },
      'step "g": execute belongs in the group\'s branches')
    refused({ name = "x", steps = { { name = "g", parallel = {
      { name = "a", parallel = { { name = "b", execute = ex } } } } } } },
      'step "g": branch "a": a branch cannot be a parallel group itself')
    refused({ name = "x", steps = { { name = "g", parallel = { { name = "a/b", execute = ex } } } } },
      'step "g": branch "a/b": a branch\'s name cannot hold a slash')
    refused({ name = "x", steps = { { name = "s", when = true, execute = ex } } },
      'step "s": step.when must be a function, got boolean')
    refused({ name = "x", steps = { { name = "g", parallel = {
      { name = "a", when = "yes", execute = ex } } } } },
      'step "g": branch "a": step.when must be a function, got string')
  end)

  it("names the file in a load error of the command line", function()
    local dir = H.tmp_dir()
    local path = H.write_file(dir, "dup.lua", [[
return { name = "dup", steps = { { name = "g", parallel = {
  { name = "a", execute = function() end }, { name = "a", execute = function() end } } } } }
]])
    local rc, out = H.shell(("%s run %s --db %s"):format(H.MEND, H.quote(path), H.quote(dir .. "/d.db")))
    assert.are.equal(1, rc)
    assert.matches(path .. ': step "g": two branches are named "a"', out, 1, true)
  end)
end)

describe("workflows/order_parallel.lua with the mend command", function()
  after_each(H.cleanup)

  local function mend_cmd(db, args)
    return H.shell(("%s %s --db %s 2>/dev/null"):format(H.MEND, args, H.quote(db)))
  end

  it("shows the branches in the timeline, the status (indented, nested in --json) and the"
     .. " history of their group", function()
    local db = H.tmp_db()
    local rc, out = mend_cmd(db, "run workflows/order_parallel.lua --clock virtual")
    assert.are.equal(0, rc, out)
    assert.matches("prepare/label%s+running %-> retry_wait", out)
    assert.matches("wrap%s+pending %-> skipped%s+%[when%(ctx%) returned false%]", out)
    -- three branches of 1.5 s, 2 s and 2 x 0.5 s side by side: shipped at about +2.3 s
    assert.matches("%+2%.3%d*s%s+%(run%)%s+running %-> succeeded", out)
    rc, out = mend_cmd(db, [[run workflows/order_parallel.lua --clock virtual --input '{"north":"empty"}']])
    assert.are.equal(3, rc, out)
    local id = out:match("run (%w+): compensated")
    assert.is_truthy(id, out)
    rc, out = mend_cmd(db, "status " .. id)
    assert.are.equal(0, rc, out)
    assert.matches("2 prepare%s+failed", out)
    assert.matches("\n%s+\u{2514} north%s+failed%s+attempts 1%s+fatal: no stock", out)
    assert.matches("\n%s+\u{2514} south%s+compensated", out)
    rc, out = mend_cmd(db, "status " .. id .. " --json")
    local st = json.decode(out)
    assert.are.equal("prepare", st.steps[2].name)
    assert.are.same({ "north", "south", "label" },
      { st.steps[2].branches[1].name, st.steps[2].branches[2].name, st.steps[2].branches[3].name })
    assert.are.equal("prepare/south", st.steps[2].branches[2].step)
    assert.are.equal("wrap", st.steps[3].name)
    rc, out = mend_cmd(db, "history " .. id .. " --step prepare")
    assert.are.equal(0, rc, out)
    assert.matches("prepare/north%s+running %-> failed", out)
    assert.matches("prepare%s+running %-> failed", out)
    assert.is_nil(out:find("charge", 1, true))
  end)
end)

describe("workflows/charge_items.lua with the mend command", function()
  after_each(H.cleanup)

  it("lists the items under their map, in the status and nested in --json", function()
    local db = H.tmp_db()
    local rc, out = H.shell(("%s run workflows/charge_items.lua --clock virtual --db %s 2>/dev/null")
      :format(H.MEND, H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.matches("charge%s+map over a list of 20 item%(s%), recorded", out)
    rc, out = H.shell(("%s run workflows/charge_items.lua --clock virtual --db %s --input %s 2>/dev/null")
      :format(H.MEND, H.quote(db), H.quote('{"lines":[{"sku":"a","price":3},{"sku":"c","price":2},'
        .. '{"sku":"b","price":-1}]}')))
    assert.are.equal(3, rc, out)
    assert.matches("charge/1%s+retry_wait %-> pending.*stopped: another item failed for good", out)
    local id = out:match("run (%w+): compensated")
    rc, out = H.shell(("%s status %s --db %s"):format(H.MEND, id, H.quote(db)))
    assert.matches("1 charge%s+failed", out)
    assert.matches("\n%s+\u{2514} 2%s+compensated%s+attempts 1%s+compensations 1", out)
    rc, out = H.shell(("%s status %s --db %s --json"):format(H.MEND, id, H.quote(db)))
    local st = json.decode(out)
    assert.are.equal(2, #st.steps)
    assert.are.same({ "1", "2", "3" }, { st.steps[1].branches[1].name, st.steps[1].branches[2].name,
                                         st.steps[1].branches[3].name })
    assert.are.equal(id .. "/charge/2", st.steps[1].branches[2].idempotency_key)
  end)
end)

-- With a real worker killed (SIGKILL) in the middle of a group, and another one started.
describe("a group with a real worker killed mid-group", function()
  after_each(H.cleanup)

  local WF = [[
local mend = require "mend"
local dir = %q
local function note(what)
  local f = assert(io.open(dir .. "/effects", "a"))
  f:write(what, "\n")
  f:close()
end
return { name = "grp", steps = {
  { name = "g", parallel = {
    { name = "fast", execute = function(ctx) note("fast " .. ctx.idempotency_key); return 1 end },
    { name = "slow", execute = function(ctx)
        note("slow " .. ctx.idempotency_key)
        if not io.open(dir .. "/go") then mend.sleep(30) end
        return 2
      end },
  } },
  { name = "done", execute = function(ctx) return ctx.results.g.fast + ctx.results.g.slow end },
} }
]]

  local function worker(db, dir)
    local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 2>>%s' >/dev/null & echo $!")
      :format(H.MEND, H.quote(db), H.quote(dir), H.quote(dir .. "/worker.log")))
    local pid = p:read("l")
    p:close()
    return pid
  end

  it("resumes the group: the branch that succeeded is not executed again", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "grp.lua", WF:format(dir))
    local db = dir .. "/g.db"
    local rc, out = H.shell(("%s start grp --db %s --workflows %s"):format(H.MEND, H.quote(db), H.quote(dir)))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir)
    H.wait_for("slow's attempt", function() return H.read(dir .. "/effects"):find("slow") ~= nil end, 10)
    H.wait_for("fast's success", function()
      local _, s = H.shell(("%s status %s --db %s --json"):format(H.MEND, id, H.quote(db)))
      local ok, st = pcall(json.decode, s)
      if not ok then return false end
      for _, step in ipairs(st.steps) do
        for _, b in ipairs(step.branches or {}) do
          if b.name == "fast" and b.status == "succeeded" then return true end
        end
      end
      return false
    end, 10)
    os.execute("kill -KILL " .. pid)
    H.write_file(dir, "go", "")
    pid = worker(db, dir)
    rc, out = H.shell(("%s wait %s --db %s --timeout 20"):format(H.MEND, id, H.quote(db)))
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(dir .. "/worker.log"))
    local effects = {}
    for line in H.read(dir .. "/effects"):gmatch("[^\n]+") do effects[#effects + 1] = line end
    table.sort(effects)
    assert.are.same({ "fast " .. id .. "/g/fast", "slow " .. id .. "/g/slow", "slow " .. id .. "/g/slow" },
      effects)
    rc, out = H.shell(("%s status %s --db %s"):format(H.MEND, id, H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.matches("g%s+succeeded", out)
    assert.matches("\n%s+└ fast%s+succeeded", out)
  end)
end)

describe("a map", function()
  after_each(H.cleanup)

  local function items_def(opts)
    opts = opts or {}
    local seen = { asked = 0, keys = {}, undone = {} }
    local def = { name = "m", steps = {
      { name = "first", execute = function() return "f" end,
        compensate = function() seen.undone[#seen.undone + 1] = "first" end },
      { name = "charge", max_concurrency = opts.max or 8,
        map = function(ctx) seen.asked = seen.asked + 1; return ctx.input.items end,
        step = {
          execute = function(ctx, item)
            seen.keys[#seen.keys + 1] = ctx.idempotency_key
            if item.t then ctx:sleep(item.t) end
            if item.bad then error(mend.fatal("bad item " .. item.sku)) end
            return item.sku
          end,
          compensate = function(ctx, sku) seen.undone[#seen.undone + 1] = sku end,
        } },
      { name = "total", execute = function(ctx) return table.concat(ctx.results.charge, ",") end },
    } }
    return def, seen
  end

  it("runs one item-attempt an element, results in the list's order, keys run/step/index", function()
    local eng = H.new_engine()
    local def, seen = items_def{ max = 2 }
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("m", { items = { { sku = "a", t = 3 }, { sku = "b", t = 1 }, { sku = "c", t = 1 } } })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ "a", "b", "c" }, H.step(st, "charge").result)
    assert.are.equal("a,b,c", H.step(st, "total").result)
    table.sort(seen.keys)
    assert.are.same({ id .. "/charge/1", id .. "/charge/2", id .. "/charge/3" }, seen.keys)
    -- two at once: c starts when b ends at +1, and ends at +2; a at +3
    assert.are.same({ 1 }, at(eng, id, t0, { step = "charge/3", to = "running" }))
    assert.are.same({ 3 }, at(eng, id, t0, { step = "charge", to = "succeeded" }))
    assert.are.equal(1, #H.events(eng, id, { event = "map", step = "charge" }))
  end)

  it("never has more than max_concurrency items in flight, over 1,000 items", function()
    local eng = H.new_engine()
    local def = items_def{ max = 8 }
    eng:register(def)
    local items = {}
    for k = 1, 1000 do items[k] = { sku = "s" .. k, t = (k % 7) * 0.1 } end
    local id = eng:start("m", { items = items })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local going, most, started = 0, 0, 0
    for _, h in ipairs(H.events(eng, id, { event = "step" })) do
      if h.step:match("^charge/") then
        if h.to == "running" then going, started = going + 1, started + 1 end
        if h.to == "succeeded" then going = going - 1 end
        most = math.max(most, going)
      end
    end
    assert.are.equal(8, most)
    assert.are.equal(1000, started)
    assert.are.equal(1000, #H.step(eng:status(id), "charge").result)
  end)

  it("compensates the items that succeeded, latest completed first, then the earlier steps",
     function()
    local eng = H.new_engine()
    local def, seen = items_def{ max = 2 }
    eng:register(def)
    local id = eng:start("m", { items = { { sku = "a", t = 1 }, { sku = "b", t = 3 }, { sku = "c", t = 1 },
                                          { sku = "d", t = 1, bad = true }, { sku = "e", t = 1 } } })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.matches("bad item d", st.error)
    assert.are.same({ "b", "c", "a", "first" }, seen.undone)
    assert.is_nil(H.step(st, "charge/5"))   -- never begun: no new attempt after d failed
    assert.are.equal("failed", H.step(st, "charge").status)
  end)

  it("resumes exactly after a restart: the same list, no item that succeeded executed again",
     function()
    local def, seen = items_def{ max = 2 }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("m", { items = { { sku = "a", t = 1 }, { sku = "b", t = 5 }, { sku = "c", t = 1 },
                                          { sku = "d", t = 1 } } })
    eng:advance(2.5)                            -- a and c succeeded, b and d in flight
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ "a", "b", "c", "d" }, H.step(st, "charge").result)
    assert.are.equal(1, seen.asked)             -- the list recorded at the start, not asked again
    local count = {}
    for _, k in ipairs(seen.keys) do count[k] = (count[k] or 0) + 1 end
    assert.are.same({ [id .. "/charge/1"] = 1, [id .. "/charge/2"] = 2, [id .. "/charge/3"] = 1,
                      [id .. "/charge/4"] = 2 }, count)
  end)

  it("keeps the compensation order across a restart", function()
    local def, seen = items_def{ max = 3 }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("m", { items = { { sku = "a", t = 2 }, { sku = "b", t = 1 },
                                          { sku = "c", t = 10, bad = true } } })
    eng:advance(5)                              -- b then a succeeded; c in flight
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.equal("compensated", eng2:status(id).status)
    assert.are.same({ "a", "b", "first" }, seen.undone)
  end)

  it("fails its step when map does not return a list, naming why", function()
    local eng = H.new_engine()
    local def = items_def()
    eng:register(def)
    local id = eng:start("m", { items = { a = 1 } })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.matches("map: must return a list", H.step(st, "charge").error)
  end)

  it("is refused at load when it cannot run, naming the step and the field", function()
    local function refused(step, message)
      local eng = H.new_engine()
      local ok, err = pcall(eng.register, eng, { name = "x", steps = { step } })
      assert.is_false(ok)
      assert.matches(message, err, 1, true)
    end
    local function ex() return 1 end
    refused({ name = "m", map = function() return {} end },
      'step "m": step is missing: a map needs the step each item runs')
    refused({ name = "m", map = true, step = { execute = ex } },
      'step "m": step.map must be a function, got boolean')
    refused({ name = "m", map = function() end, step = { compensate = ex } },
      'step "m": execute is missing (a function is required)')
    refused({ name = "m", map = function() end, step = { execute = ex }, max_concurrency = 0 },
      'step "m": max_concurrency must be a positive integer, got 0')
    refused({ name = "m", map = function() end, step = { name = "x", execute = ex } },
      "step \"m\": step.name: a map's step is named by each item's index")
    refused({ name = "m", map = function() end, execute = ex, step = { execute = ex } },
      "step \"m\": execute belongs in the map's step")
  end)
end)

describe("a map that fails or is cancelled with only items done", function()
  after_each(H.cleanup)

  it("compensates its items though no step before it succeeded", function()
    local undone = {}
    local def = { name = "only", steps = {
      { name = "m", max_concurrency = 4, map = function(ctx) return ctx.input end,
        step = { execute = function(ctx, item)
            ctx:sleep(item.t)
            if item.bad then error(mend.fatal("bad")) end
            return item.n
          end, compensate = function(_, n) undone[#undone + 1] = n end } },
    } }
    local eng = H.new_engine()
    eng:register(def)
    local id = eng:start("only", { { n = 1, t = 1 }, { n = 2, t = 2 }, { n = 3, t = 3, bad = true } })
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ 2, 1 }, undone)
    undone = {}
    local id2 = eng:start("only", { { n = 1, t = 1 }, { n = 2, t = 50 } })
    eng:advance(5)
    eng:cancel(id2)
    eng:run()
    local st = eng:status(id2)
    assert.are.equal("compensated", st.status)
    assert.are.same({ 1 }, undone)
    assert.are.equal("failed", H.step(st, "m/2").status)
  end)
end)
