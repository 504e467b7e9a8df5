-- The kind of an error raised outside a step's execute: in its when(ctx), its
-- idempotency_key(ctx), a map's list function, a child step's input(ctx). SPEC section 3 says
-- kinds survive, and README says an error in `when` fails the step like an error of its code: a
-- retryable one is retried after its backoff (or its retry_after) as an attempt, a fatal one is
-- not and the run compensates, a plain one fails the step for good; the history keeps the kind
-- as it does for execute's errors.
-- On the virtual clock, then a real worker killed while a `when` waits for its retry.
local H = require "spec.helper"
local mend = require "mend"
local json = mend.json

local RETRY = { max_attempts = 3, initial = 2, jitter = 0 }

-- The four places, each as a workflow whose code outside execute raises `raise()` on its
-- first `fails` calls (1 unless given) and answers on the next ones. `box.asked` counts those
-- calls, `box.executed` the executions (a child step's: its child's); the step before has a
-- compensation `box.undone` counts. register() registers a child step's child workflow too.
local function place_def(place, raise, fails)
  local box = { asked = 0, executed = 0, undone = 0 }
  local function asked()
    box.asked = box.asked + 1
    if box.asked <= (fails or 1) then error(raise()) end
  end
  local first = { name = "first", execute = function() return 1 end,
                  compensate = function() box.undone = box.undone + 1 end }
  local s
  if place == "input" then
    local function run_child() box.executed = box.executed + 1; return 1 end
    box.child = { name = "w_input_child", steps = { { name = "c", execute = run_child } } }
    s = { name = "s", retry = RETRY, child = box.child.name,
          input = function() asked(); return {} end }
  elseif place == "map" then
    s = { name = "s", map = function() asked(); return { 10, 20 } end,
          step = { retry = RETRY, execute = function(_, n) box.executed = box.executed + 1; return n end } }
  else
    s = { name = "s", retry = RETRY, execute = function() box.executed = box.executed + 1; return 1 end }
    if place == "when" then s.when = function() asked(); return true end
    else s.idempotency_key = function() asked(); return "key-" .. box.asked end end
  end
  return { name = "w_" .. place, steps = { first, s } }, box
end

local function register(eng, def, box)
  eng:register(def)
  if box.child then eng:register(box.child) end
end

-- The kinds the history's rows of step s into `to` keep (SQLite's history codes its names).
local function kinds(db, id, to)
  return H.sql(db, ("SELECT error_kind FROM %s WHERE run_id = '%s' AND step = 's'"
    .. " AND event = 'step' AND to_status = '%s' ORDER BY seq")
    :format(H.is_pg(db) and "history" or "history_named", id, to))
end

for _, place in ipairs{ "when", "idempotency_key", "map", "input" } do
  describe("an error of a step's " .. place, function()
    after_each(H.cleanup)

    it("that is retryable is retried after its backoff, counted as an attempt, its kind kept",
       function()
      local def, box = place_def(place, function() return mend.retryable("busy") end)
      local eng, db = H.new_engine()
      register(eng, def, box)
      local t0 = eng:now()
      local id = eng:start(def.name, {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(2, box.asked)
      assert.are.equal(place == "map" and 2 or 1, box.executed)
      assert.are.equal(0, box.undone)
      assert.are.equal(2, H.step(st, "s").attempts)
      assert.are.same({ 2 }, H.retry_delays(eng, id, "s"))
      local again = H.events(eng, id, { event = "step", step = "s", from = "retry_wait" })
      assert.are.equal(1, #again)
      assert.are.equal(2, again[1].at - t0)
      assert.are.same({ "retryable" }, kinds(db, id, "retry_wait"))
      local row = H.events(eng, id, { event = "step", step = "s", to = "retry_wait" })[1]
      assert.matches("^retryable: " .. place .. ": busy$", row.error)
    end)

    it("that is retryable waits for its retry_after, and fails for good once attempts run out",
       function()
      local def, box = place_def(place, function() return mend.retryable("later", { retry_after = 7 }) end)
      local eng = H.new_engine()
      register(eng, def, box)
      local id = eng:start(def.name, {})
      eng:run()
      assert.are.same({ 7 }, H.retry_delays(eng, id, "s"))
      assert.are.equal("succeeded", eng:status(id).status)
      -- always busy: three attempts (RETRY.max_attempts), then the dead-letter queue
      local def2, box2 = place_def(place, function() return mend.retryable("busy") end, math.huge)
      local eng2 = H.new_engine()
      register(eng2, def2, box2)
      local id2 = eng2:start(def2.name, {})
      eng2:run()
      local st2 = eng2:status(id2)
      assert.are.equal("needs_attention", st2.status)
      assert.are.equal(3, box2.asked)
      assert.are.equal(0, box2.executed)
      assert.are.equal(1, box2.undone)
      assert.are.equal("attempts_exhausted", H.dlq_entry(eng2, id2).reason)
      assert.are.equal(2, box.asked)
    end)

    it("that is fatal is not retried: the run compensates, the kind kept", function()
      local def, box = place_def(place, function() return mend.fatal("declined") end)
      local eng, db = H.new_engine()
      register(eng, def, box)
      local id = eng:start(def.name, {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.are.equal(1, box.asked)
      assert.are.equal(0, box.executed)
      assert.are.equal(1, box.undone)
      assert.are.equal(1, H.step(st, "s").attempts)
      assert.are.same({}, H.retry_delays(eng, id, "s"))
      assert.are.same({ "fatal" }, kinds(db, id, "failed"))
      assert.matches("^fatal: " .. place .. ": declined$", H.step(st, "s").error)
    end)

    it("that is a plain Lua error fails the step for good, as an error of its code", function()
      local def, box = place_def(place, function() return "no idea" end)
      local eng, db = H.new_engine()
      register(eng, def, box)
      local id = eng:start(def.name, {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("compensated", st.status)
      assert.are.equal(1, box.asked)
      assert.are.same({}, H.retry_delays(eng, id, "s"))
      assert.are.same({ "error" }, kinds(db, id, "failed"))
      assert.matches("^error: " .. place .. ": .*no idea$", H.step(st, "s").error)
    end)
  end)
end

describe("a retryable error of a group's when, or of its branch's", function()
  after_each(H.cleanup)

  it("retries the group by the workflow's policy and the branch by its own, each asked again",
     function()
    local asked = { grp = 0, a = 0 }
    local function busy_once(name, opts)
      return function()
        asked[name] = asked[name] + 1
        if asked[name] == 1 then error(mend.retryable(name .. " busy", opts)) end
        return true
      end
    end
    local eng = H.new_engine()
    eng:register{ name = "g", retry = { initial = 2, jitter = 0 }, steps = {
      { name = "grp", when = busy_once("grp"), parallel = {
        { name = "a", retry = { max_attempts = 3 }, when = busy_once("a", { retry_after = 3 }),
          execute = function() return "A" end },
        { name = "b", execute = function() return "B" end },
      } } } }
    local t0 = eng:now()
    local id = eng:start("g", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ grp = 2, a = 2 }, asked)
    assert.are.same({ a = "A", b = "B" }, H.step(st, "grp").result)
    assert.are.same({ 2 }, H.retry_delays(eng, id, "grp"))
    assert.are.same({ 3 }, H.retry_delays(eng, id, "grp/a"))
    assert.are.equal(5, eng:now() - t0)
  end)
end)

describe("a retryable error outside execute, across a restart", function()
  after_each(H.cleanup)

  for _, place in ipairs{ "when", "idempotency_key", "map", "input" } do
    it("of a step's " .. place .. " waits out its stored retry, then asks again", function()
      local def, box = place_def(place, function() return mend.retryable("busy") end)
      local eng, db = H.new_engine()
      register(eng, def, box)
      local t0 = eng:now()
      local id = eng:start(def.name, {})
      eng:advance(1)
      assert.are.equal("retry_wait", H.step(eng:status(id), "s").status)
      H.close(eng)
      local eng2 = H.reopen(db)
      register(eng2, def, box)
      assert.are.equal(1, eng2:recover())
      eng2:run()
      local st = eng2:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(2, box.asked)
      assert.are.equal(place == "map" and 2 or 1, box.executed)
      assert.are.equal(2, H.step(st, "s").attempts)
      local again = H.events(eng2, id, { event = "step", step = "s", from = "retry_wait" })
      assert.are.equal(2, again[1].at - t0)
    end)
  end
end)

describe("a when(ctx) that raised a retryable error, across a restart", function()
  after_each(H.cleanup)

  it("is asked again when its retry is due, then the step executes once", function()
    local asked, executed = 0, 0
    local def = { name = "wr", steps = {
      { name = "s", retry = { max_attempts = 3, initial = 10, jitter = 0 },
        when = function()
          asked = asked + 1
          if asked == 1 then error(mend.retryable("busy")) end
          return true
        end,
        execute = function() executed = executed + 1; return "done" end },
    } }
    local eng, db = H.new_engine()
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("wr", {})
    eng:advance(4)
    assert.are.equal("retry_wait", H.step(eng:status(id), "s").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(2, asked)
    assert.are.equal(1, executed)
    assert.are.equal(2, H.step(st, "s").attempts)
    -- at its stored due time, not again from the restart
    local again = H.events(eng2, id, { event = "step", step = "s", from = "retry_wait" })
    assert.are.equal(10, again[1].at - t0)
    assert.are.equal(1, #H.events(eng2, id, { event = "when", step = "s" }))
  end)
end)

describe("a real worker killed while a when(ctx) waits for its retry", function()
  after_each(H.cleanup)

  local WF = [[
local mend = require "mend"
local dir = %q
local function note(what)
  local f = assert(io.open(dir .. "/effects", "a"))
  f:write(what, "\n")
  f:close()
end
return { name = "gate", steps = {
  { name = "s", retry = { max_attempts = 3, initial = 5, jitter = 0 },
    when = function(ctx)
      note("when")
      if not io.open(dir .. "/open") then error(mend.retryable("gate closed")) end
      return true
    end,
    execute = function(ctx) note("execute " .. ctx.idempotency_key); return "done" end },
} }
]]

  local function worker(db, dir)
    local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 2>>%s' >/dev/null & echo $!")
      :format(H.MEND, H.quote(db), H.quote(dir), H.quote(dir .. "/worker.log")))
    local pid = p:read("l")
    p:close()
    return pid
  end

  it("resumes it: when asked again at its due time, the step executed once", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "gate.lua", WF:format(dir))
    local db = H.new_db(dir, "g.db")
    local rc, out = H.shell(("%s start gate --db %s --workflows %s"):format(H.MEND, H.quote(db), H.quote(dir)))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir)
    local waited, why = pcall(H.wait_for, "the retry_wait of when's error", function()
      local _, s = H.shell(("%s status %s --db %s --json"):format(H.MEND, id, H.quote(db)))
      local ok, st = pcall(json.decode, s)
      return ok and type(st) == "table" and H.step(st, "s") and H.step(st, "s").status == "retry_wait"
    end, 10)
    os.execute("kill -KILL " .. pid)
    assert(waited, why)
    H.write_file(dir, "open", "")
    pid = worker(db, dir)
    rc, out = H.shell(("%s wait %s --db %s --timeout 20"):format(H.MEND, id, H.quote(db)))
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(dir .. "/worker.log"))
    local effects = {}
    for line in H.read(dir .. "/effects"):gmatch("[^\n]+") do effects[#effects + 1] = line end
    assert.are.same({ "when", "when", "execute " .. id .. "/s" }, effects)
    assert.are.same({ "retryable" }, kinds(db, id, "retry_wait"))
  end)
end)

-- A step whose retry came due while its breaker was half-open was let through as the breaker's
-- probe before its when(ctx) or its key answered; when it then does not execute (skipped, or
-- its key's result reused) the probe is given back, or every other step on the breaker waits
-- for an outcome that never comes.
describe("a retry let through as a half-open probe that does not execute", function()
  after_each(H.cleanup)
  local POLICY = { key = "dep", failure_threshold = 1, open_seconds = 10, success_threshold = 1,
                   half_open_max = 1 }

  -- b fails once on dep (opening it for 10 s) and is retried at t+30; a's retry, due at t+20
  -- while the breaker is half-open, is admitted as its one probe.
  local function other(eng)
    local calls = 0
    eng:register(H.one_step("b", { breaker = "dep",
      retry = { max_attempts = 5, initial = 30, strategy = "fixed", jitter = 0 },
      execute = function()
        calls = calls + 1
        if calls == 1 then error(mend.retryable("down")) end
        return "b"
      end }))
    return function() return calls end
  end
  local RETRY20 = { max_attempts = 5, initial = 20, strategy = "fixed", jitter = 0 }

  it("gives it back when its when(ctx) then says false", function()
    local eng = H.new_engine()
    local asked = 0
    eng:register(H.one_step("a", { breaker = POLICY, retry = RETRY20,
      when = function()
        asked = asked + 1
        if asked == 1 then error(mend.retryable("busy")) end
        return false
      end,
      execute = function() return "a" end }))
    local calls = other(eng)
    local a, b = eng:start("a", {}), eng:start("b", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    eng:advance(25)
    assert.are.equal("skipped", H.step(eng:status(a), "work").status)
    eng:advance(300)
    assert.are.equal("succeeded", eng:status(b).status)
    assert.are.equal(2, calls())
    assert.are.equal("closed", H.breaker(eng, "dep").state)
  end)

  it("gives it back when its key's result is then found already succeeded", function()
    local eng = H.new_engine()
    eng:register(H.one_step("pre", { idempotency_key = function() return "K" end,
      execute = function() return "done" end }))
    local pre = eng:start("pre", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(pre).status)
    local asked = 0
    eng:register(H.one_step("a", { breaker = POLICY, retry = RETRY20,
      idempotency_key = function()
        asked = asked + 1
        if asked == 1 then error(mend.retryable("busy")) end
        return "K"
      end,
      execute = function() return "a" end }))
    local calls = other(eng)
    local a, b = eng:start("a", {}), eng:start("b", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    eng:advance(25)
    assert.are.equal("succeeded", eng:status(a).status)
    eng:advance(300)
    assert.are.equal("succeeded", eng:status(b).status)
    assert.are.equal(2, calls())
  end)
  it("gives it back when the step then sleeps before it executes, and asks again after", function()
    local eng = H.new_engine()
    local asked, ran = 0, 0
    eng:register(H.one_step("a", { breaker = POLICY, retry = RETRY20, sleep = 5,
      when = function()
        asked = asked + 1
        if asked == 1 then error(mend.retryable("busy")) end
        return true
      end,
      execute = function() ran = ran + 1; return "a" end }))
    local calls = other(eng)
    local a, b = eng:start("a", {}), eng:start("b", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    eng:advance(300)
    assert.are.equal("succeeded", eng:status(a).status)
    assert.are.equal("succeeded", eng:status(b).status)
    assert.are.equal(1, ran)
    assert.are.equal(2, calls())
  end)

  it("is the admitted step's alone: the next step, once it is skipped, asks its own breaker", function()
    local eng = H.new_engine()
    local asked, second = 0, 0
    eng:register({ name = "a", steps = {
      { name = "first", breaker = POLICY, retry = RETRY20,
        when = function()
          asked = asked + 1
          if asked == 1 then error(mend.retryable("busy")) end
          return false
        end,
        execute = function() return "first" end },
      { name = "second", breaker = { key = "other", failure_threshold = 1, open_seconds = 1000 },
        execute = function() second = second + 1; return "second" end },
    } })
    eng:register(H.one_step("o", { breaker = "other", retry = { max_attempts = 1 },
      execute = function() error(mend.retryable("down")) end }))
    other(eng)
    eng:start("o", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "other").state)
    local a = eng:start("a", {})
    eng:start("b", {})
    eng:advance(1)
    assert.are.equal("open", H.breaker(eng, "dep").state)
    eng:advance(25)
    assert.are.equal("skipped", H.step(eng:status(a), "first").status)
    assert.are.equal(0, second)
    assert.are.equal("breaker_open", H.step(eng:status(a), "second").status)
  end)
end)
