-- Acceptance, from outside: flows across runs and restarts (SPEC sections 6, 8, 11, 12, 13):
-- event keys after the event was taken, child runs in the dead-letter queue, the order of
-- compensation of groups and maps, prune forgetting keys, versions kept by a run. Lua API,
-- SQLite files, virtual clock.
local mend = require "mend"
local H = require "spec.helper"

describe("acceptance: flows #sqlite", function()
  after_each(H.cleanup)

  it("keeps an event key a duplicate after its event was taken; keys are per run", function()
    local eng = H.new_engine()
    eng:register { name = "e", steps = { { name = "w1", wait_for = "e" },
                                         { name = "w2", wait_for = "e", timeout = 5 } } }
    local id, id2 = eng:start("e", {}), eng:start("e", {})
    eng:advance(0.1)
    assert.are.equal("sent", (eng:signal(id, "e", 1, { key = "k" })))
    eng:advance(0.1)
    assert.are.equal("succeeded", H.step(eng:status(id), "w1").status)
    assert.are.equal("duplicate", (eng:signal(id, "e", 2, { key = "k" })))
    assert.are.equal("sent", (eng:signal(id2, "e", 3, { key = "k" })))
    eng:run()
    local st = eng:status(id)
    assert.are.same({ "compensated", "timeout", 1 }, { st.status, st.reason, H.step(st,
      "w1").result })
    assert.are.equal(3, H.step(eng:status(id2), "w1").result)
    local id3 = eng:start("e", {}, { key = "RK" })
    eng:advance(0.1)
    assert.are.equal("sent", (eng:signal(nil, "e", 9, { run_key = "RK" })))
    eng:advance(0.1)
    assert.are.equal(9, H.step(eng:status(id3), "w1").result)
  end)

  it("keeps a parent waiting on a child in the queue: retried it goes on, resolved it fails",
    function()
      local eng = H.new_engine()
      local fixed, log = false, {}
      eng:register { name = "kid", steps = { { name = "k", execute = function()
        if not fixed then error(mend.compensable("?", { severity = 3 })) end
        return "kid ok" end } } }
      eng:register { name = "par", steps = {
        { name = "p1", execute = function() return 1 end,
          compensate = function() log[#log + 1] = "undo p1" end },
        { name = "c", child = "kid" },
        { name = "after", execute = function(ctx) return ctx.results.c.k end } } }
      local p1 = eng:start("par", {})
      eng:run()
      local k1 = eng:runs{ workflow = "kid" }[1]
      assert.are.same({ "running", "waiting", "needs_attention" },
        { eng:status(p1).status, H.step(eng:status(p1), "c").status, k1.status })
      fixed = true
      eng:dlq_retry(k1.id, { who = "t" })
      eng:run()
      assert.are.equal("succeeded", eng:status(p1).status)
      assert.are.equal("kid ok", H.step(eng:status(p1), "after").result)
      fixed = false
      local p2 = eng:start("par", {})
      eng:run()
      local k2 = eng:runs{ workflow = "kid", status = "needs_attention" }[1]
      eng:resolve(k2.id, { note = "done by hand", who = "t" })
      eng:run()
      local st = eng:status(p2)
      assert.are.same({ "compensated", "failed" }, { st.status, H.step(st, "c").status })
      assert.matches("resolved", H.step(st, "c").error)
      assert.are.same({ "undo p1" }, log)
    end)

  it("undoes a group's branches and a map's items latest completed first", function()
    local eng = H.new_engine()
    local log = {}
    local function br(name, t)
      return { name = name, execute = function() mend.sleep(t); return name end,
               compensate = function() log[#log + 1] = name end }
    end
    eng:register { name = "g", steps = { br("first", 0),
      { name = "grp", parallel = { br("x", 1), br("y", 3), br("z", 2) } },
      { name = "m", map = function() return { 3, 1, 2 } end, step = {
        execute = function(_, i) mend.sleep(i); return i end,
        compensate = function(_, r) log[#log + 1] = "m" .. r end } },
      { name = "boom", execute = function() error(mend.fatal("no")) end } } }
    local id = eng:start("g", {})
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "m3", "m2", "m1", "y", "z", "x", "first" }, log)
  end)

  it("forgets a pruned run's key and custom keys, never prunes a dead letter", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register { name = "p", steps = { { name = "s",
      idempotency_key = function(ctx) return "cust-" .. ctx.input.o end,
      execute = function() calls = calls + 1; return calls end } } }
    local a = eng:start("p", { o = 1 }, { key = "K" })
    eng:run()
    eng:register { name = "d", steps = { { name = "s",
      execute = function() error(mend.compensable("x", { severity = 3 })) end } } }
    local d = eng:start("d", {})
    eng:run()
    eng:advance(100)
    local pruned = eng:prune { older_than = 50 }
    assert.are.same({ succeeded = 1 }, pruned.runs)
    for _, status in ipairs { "needs_attention", "running", "\255" } do
      local ok, err = pcall(eng.prune, eng, { older_than = 50, status = status })
      assert.is_false(ok)
      assert.matches("prune: status must be one a run ends in: succeeded, compensated, " ..
                     "failed, resolved", tostring(err), 1, true)
    end
    assert.are.equal("needs_attention", eng:status(d).status)
    local b, existed = eng:start("p", { o = 1 }, { key = "K" })
    eng:run()
    assert.are_not.equal(a, b)
    assert.falsy(existed)
    assert.are.equal(2, calls)
  end)

  it("runs the version a run started with, whatever its file says later", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir)
    local function write(v)
      H.write_file(dir, "v.lua", ([[return { name = "v", steps = {
        { name = "a", sleep = 50, execute = function() return "%s" end } } }]]):format(v))
    end
    write("old")
    local eng = H.new_engine({ db = db })
    eng:load(dir .. "/v.lua")
    local id = eng:start("v", {})
    eng:advance(1)
    H.close(eng)
    write("new")
    local eng2 = H.reopen(db)
    eng2:load(dir .. "/v.lua")
    eng2:recover()
    eng2:run()
    assert.are.equal("old", H.step(eng2:status(id), "a").result)
    local id2 = eng2:start("v", {})
    eng2:run()
    assert.are.equal("new", H.step(eng2:status(id2), "a").result)
  end)
end)
