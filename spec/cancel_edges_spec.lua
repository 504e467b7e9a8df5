-- Cancels at the edges: a parent cancelled while its child sits in the dead-letter queue, and a
-- cancel asked of a run that ends first by its own failure (each says what the user relies on).
local H = require "spec.helper"
local json = require("mend").json

local MEND, q = H.MEND, H.quote

local mend_in = H.mend_in

describe("a cancel at the edges", function()
  after_each(H.cleanup)

  -- SPEC 11: "a parent cancelled cancels it [its child]". A child in the dead-letter queue as
  -- its parent is cancelled, then retried by a person: its failed step, and every step after
  -- it, run forward for an order that was cancelled (here a customer e-mail that nothing can
  -- take back), and only then is the child undone.
  it("does not run a cancelled parent's dead-lettered child forward on dlq retry", function()
    local eng = H.new_engine()
    local log = {}
    local broken = true
    eng:register{ name = "shipping", steps = {
      { name = "pack", execute = function() log[#log + 1] = "pack" return { box = 1 } end,
        compensate = function() log[#log + 1] = "unpack" end },
      { name = "label", execute = function()
          if broken then error(require("mend").compensable("printer jam", { severity = 3 })) end
          log[#log + 1] = "label"
          return { t = 1 } end,
        compensate = function() log[#log + 1] = "void label" end },
      { name = "email", execute = function() log[#log + 1] = "email customer: shipped" end },
    } }
    eng:register{ name = "order", steps = {
      { name = "charge", execute = function() return { charged = 5 } end,
        compensate = function() log[#log + 1] = "refund" end },
      { name = "ship", child = "shipping", input = function(ctx) return { order = 1 } end },
    } }
    local id = eng:start("order", { id = "o1" })
    eng:run()
    local c = eng:status(id).children[1]
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    eng:cancel(id)
    eng:run()
    broken = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    -- what the user relies on: nothing of the cancelled order's child runs forward again (its
    -- failed step, compensable, is undone as a compensable failure is)
    assert.are.same({ "pack", "void label", "unpack", "refund" }, log)
  end)

  -- Not qa6b's (before it too): a cancel asked of a live worker's run that goes compensating
  -- for its own step's failure before the worker looks is never taken (schema.c: the look asks
  -- only for runs 'running'), so it is neither done nor refused, and the ended run's status
  -- keeps cancel_requested = true for good, though docs/lua-api.md says the field is "true, if
  -- a cancel waits". (The refusal qa6b's repair.c change no longer logs could only come from a
  -- run the store still has 'running': a parked run, or a compensating one whose batch is not
  -- committed yet.)
  it("forgets a requested cancel of a run that ended compensating for its own failure", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "busy.lua", [[
local mend = require "mend"
return { name = "busy", steps = {
  { name = "a", execute = function() return 1 end,
    compensate = function() mend.sleep(3) end },
  { name = "b", execute = function()
      local t = os.clock(); while os.clock() - t < 1.5 do end   -- the worker's loop is busy
      error(mend.fatal("b refused")) end },
} }]])
    local db = H.new_db(dir, "jobs.db")
    local rc, out, err = mend_in(dir, db, "start busy --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local log = dir .. "/worker.log"
    local p = io.popen(("cd %s && sh -c 'exec %s worker --workflows . --poll 0.02"
      .. " --log-level debug --db %s 2>%s' >/dev/null & echo $!"):format(q(dir), MEND, q(db), q(log)))
    local worker = p:read("l")
    p:close()
    H.wait_for("step b to run", function()
      local _, o = mend_in(nil, db, "status " .. id .. " --json")
      local st = json.decode(o)
      return st and st.steps and st.steps[2].status == "running"
    end, 20)
    rc, out, err = mend_in(nil, db, "cancel " .. id)
    assert.are.equal(0, rc, err)
    assert.matches("it was asked to cancel", out)
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 20")
    os.execute("kill -TERM " .. worker)
    assert.are.equal(3, rc, out .. err)
    local _, o = mend_in(nil, db, "status " .. id .. " --json")
    local st = json.decode(o)
    local text = H.read(log)
    assert.are.equal("fatal", st.reason)   -- compensated for b's failure, not cancelled
    assert.is_nil(text:find("only a running run can be cancelled", 1, true))
    assert.is_nil(st.cancel_requested, "an ended run still says a cancel waits")
  end)

  it("returns from `mend cancel` of a parent whose child is in the dead-letter queue", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "shipping.lua", [[
local mend = require "mend"
return { name = "shipping", steps = {
  { name = "pack", execute = function() return 1 end, compensate = function() end },
  { name = "label", execute = function() error(mend.compensable("printer jam", { severity = 3 })) end },
} }]])
    H.write_file(dir, "order.lua", [[
return { name = "order", steps = {
  { name = "charge", execute = function() return 1 end, compensate = function() end },
  { name = "ship", child = "shipping", input = function() return {} end },
} }]])
    local db = H.new_db(dir, "jobs.db")
    local rc, out, err = mend_in(dir, db, "start order --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local p = io.popen(("cd %s && sh -c 'exec %s worker --workflows . --poll 0.02 --db %s"
      .. " >/dev/null 2>&1' & echo $!"):format(q(dir), MEND, q(db)))
    local worker = p:read("l")
    p:close()
    H.wait_for("the child in the dead-letter queue", function()
      local _, o = mend_in(nil, db, "dlq --json")
      local ok, list = pcall(json.decode, o)
      return ok and type(list) == "table" and #list == 1
    end, 20)
    os.execute("kill -TERM " .. worker .. "; while kill -0 " .. worker .. " 2>/dev/null; do sleep 0.05; done")
    local t0 = H.wall()
    local errfile = dir .. "/cancel.err"
    local ok, _, code = os.execute(("cd %s && timeout 15 %s cancel %s --db %s >%s 2>%s")
      :format(q(dir), MEND, id, q(db), q(dir .. "/cancel.out"), q(errfile)))
    assert.are_not.equal(124, code, "mend cancel did not return in 15 s: " .. H.read(errfile))
    assert.is_true(H.wall() - t0 < 14)
    assert.matches("waits for its child run %S+, in the dead%-letter queue", H.read(dir .. "/cancel.out"))
    -- the child repaired by hand, a worker carries the parent on to its end
    local child = json.decode(select(2, mend_in(nil, db, "dlq --json")))[1].run_id
    rc, out, err = mend_in(nil, db, "dlq resolve " .. child .. " --note 'label voided by hand'")
    assert.are.equal(0, rc, err)
    p = io.popen(("cd %s && sh -c 'exec %s worker --workflows . --poll 0.02 --db %s"
      .. " >/dev/null 2>&1' & echo $!"):format(q(dir), MEND, q(db)))
    worker = p:read("l")
    p:close()
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 20")
    os.execute("kill -TERM " .. worker)
    assert.are.equal(3, rc, out .. err)
    assert.are.equal("compensated", json.decode(select(2, mend_in(nil, db, "status " .. id .. " --json"))).status)
  end)
  it("shows a run cancelled while it waited, its undoing retried, as cancelled by its canceller", function()
    -- the step it waited at never failed: what turned it back is the cancel, not the undoing's
    -- error
    local eng = H.new_engine()
    local closed = true
    eng:register{ name = "w", steps = {
      { name = "a", execute = function() return 1 end, compensate_retry = { max_attempts = 1 },
        compensate = function() if closed then error("the warehouse is closed") end end },
      { name = "paid", wait_for = "payment" } } }
    local id = eng:start("w", {})
    eng:run()
    eng:cancel(id, { who = "ana via http 10.0.0.7:7070" })   -- a colon of its own: no note
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    assert.are.equal("compensation_failed", eng:status(id).reason)
    closed = false
    eng:dlq_retry(id)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled by ana via http 10.0.0.7:7070", st.error)
  end)
end)
