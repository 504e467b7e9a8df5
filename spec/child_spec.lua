-- Child runs (child = "workflow", issue 18): a step starts a run of another workflow, keyed by
-- its parent and step, waits for its end without a coroutine, and takes its outcome; a parent
-- that compensates reverses a child that succeeded as a whole; cancelling the parent cancels a
-- running child; status shows the links both ways. First through the Lua API on the virtual
-- clock, then with real `mend worker` processes.
local H = require "spec.helper"
local json = require("mend").json

local MEND = H.MEND
local q = H.quote

-- shipping: pack, then (optionally) wait for the carrier's pickup event, then label.
local function shipping(log, opts)
  opts = opts or {}
  local steps = {
    { name = "pack", execute = function(_, input)
        if input.broken then error(require("mend").fatal("nothing to pack")) end
        log[#log + 1] = "pack " .. input.order
        return { box = "box-" .. input.order }
      end,
      compensate = function(_, r) log[#log + 1] = "unpack " .. r.box end },
  }
  if opts.pickup then steps[#steps + 1] = { name = "pickup", wait_for = "picked_up" } end
  steps[#steps + 1] = { name = "label", execute = function(_, input)
      return { tracking = "trk-" .. input.order } end,
    compensate = function(_, r) log[#log + 1] = "void " .. r.tracking end }
  return { name = "shipping", steps = steps }
end

-- order: charge, ship (the child), then a last step that may fail.
local function order(log)
  return { name = "order", steps = {
    { name = "charge", execute = function() return { charged = 5 } end,
      compensate = function() log[#log + 1] = "refund" end },
    { name = "ship", child = "shipping",
      input = function(ctx) return { order = ctx.input.id, broken = ctx.input.broken } end },
    { name = "confirm", execute = function(ctx)
        if ctx.input.fail_last then error(require("mend").fatal("confirmation refused")) end
        return { tracking = ctx.results.ship.label.tracking }
      end },
  } }
end

local function setup(opts)
  local eng, db = H.new_engine()
  local log = {}
  eng:register(shipping(log, opts))
  eng:register(order(log))
  return eng, log, db
end

local function child_of(eng, id)
  local st = eng:status(id)
  return st.children and st.children[1]
end

describe("a step with child", function()
  after_each(H.cleanup)

  it("starts the child, waits for it, and takes its results; links show both ways", function()
    local eng, log = setup()
    local id = eng:start("order", { id = "o1" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    local c = st.children[1]
    assert.are.equal("ship", c.step)
    assert.are.equal("shipping", c.workflow)
    assert.are.equal("succeeded", c.status)
    assert.are.same({ pack = { box = "box-o1" }, label = { tracking = "trk-o1" } },
                    H.step(st, "ship").result)
    assert.are.same({ tracking = "trk-o1" }, H.step(st, "confirm").result)
    local cst = eng:status(c.run_id)
    assert.are.equal(id, cst.parent_run)
    assert.are.equal("ship", cst.parent_step)
    assert.are.equal(id .. "/ship", cst.key)
    assert.are.same({ "pending->running", "running->waiting", "waiting->succeeded" },
                    H.transitions(eng, id, "ship"))
    assert.are.same({ "pack o1" }, log)
  end)

  it("fails the step (fatal) when the child fails or compensates, and the parent compensates",
     function()
    local eng, log = setup()
    local id = eng:start("order", { id = "o2", broken = true })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("fatal", st.reason)
    local c = child_of(eng, id)
    assert.are.equal("failed", c.status)
    assert.matches("^fatal: child run " .. c.run_id .. " failed: fatal: nothing to pack",
                   H.step(st, "ship").error)
    assert.are.same({ "refund" }, log)
  end)

  it("compensates a child that succeeded as a whole when the parent compensates", function()
    local eng, log = setup()
    local id = eng:start("order", { id = "o3", fail_last = true })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("compensated", H.step(st, "ship").status)
    local c = child_of(eng, id)
    assert.are.equal("compensated", c.status)
    -- the child's own saga, reversed, before the parent's earlier steps
    assert.are.same({ "pack o3", "void trk-o3", "unpack box-o3", "refund" }, log)
    local cst = eng:status(c.run_id)
    assert.are.equal("parent_compensated", cst.reason)
    local runs = {}
    for _, e in ipairs(eng:history(c.run_id)) do
      if e.event == "run" then runs[#runs + 1] = (e.from or "") .. "->" .. e.to end
    end
    assert.are.same({ "->running", "running->succeeded", "succeeded->compensating",
                      "compensating->compensated" }, runs)
    assert.are.same({ "pending->running", "running->waiting", "waiting->succeeded",
                      "succeeded->compensating", "compensating->compensated" },
                    H.transitions(eng, id, "ship"))
  end)


  -- The child ended, but its parent may still undo it: a prune that took it had the parent
  -- mark its step compensated with nothing undone (the child's row was gone).
  it("keeps a child that succeeded from a prune while its parent may still undo it", function()
    local eng, db = H.new_engine()
    local log = {}
    eng:register(shipping(log))
    eng:register { name = "order", steps = {
      { name = "ship", child = "shipping", input = function() return { order = "o9" } end },
      { name = "go", wait_for = "go" },
      { name = "confirm", execute = function() error(require("mend").fatal("refused")) end },
    } }
    local id = eng:start("order", {})
    eng:run()
    local c = child_of(eng, id)
    assert.are.equal("succeeded", c.status)
    eng:advance(100)
    local kept = eng:prune { older_than = 50 }
    assert.are.same({}, kept.runs)
    -- and says it kept it: "no runs ended ...: nothing to prune" was read as none having ended
    assert.are.equal(1, kept.kept)
    local rc, out = H.mend_cmd(db, "prune --older-than 0s --dry-run")
    assert.are.equal(0, rc, out)
    assert.matches("may be pruned yet\n  kept 1 ended child run: a run above it is unfinished or "
                   .. "in the dead%-letter queue", out)
    eng:signal(id, "go")
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.equal("compensated", eng:status(c.run_id).status)
    assert.are.same({ "pack o9", "void trk-o9", "unpack box-o9" }, log)
    -- once the parent has ended, the child goes with it
    eng:advance(100)
    local pruned = eng:prune { older_than = 50 }
    assert.are.same({ compensated = 2 }, pruned.runs)
    assert.are.equal(0, pruned.kept)
  end)
  it("cancels a running child with its parent", function()
    local eng, log = setup{ pickup = true }
    local id = eng:start("order", { id = "o4" })
    eng:advance(1)
    local c = child_of(eng, id)
    assert.are.equal("running", c.status)
    assert.are.equal("waiting", H.step(eng:status(c.run_id), "pickup").status)
    assert.are.equal("waiting", H.step(eng:status(id), "ship").status)
    eng:cancel(id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    local cst = eng:status(c.run_id)
    assert.are.equal("compensated", cst.status)
    assert.are.equal("cancelled", cst.reason)
    -- what the child did came after the charge: it is undone first (SPEC section 7)
    assert.are.same({ "pack o4", "unpack box-o4", "refund" }, log)
  end)

  -- shipping whose pack cannot be undone while the warehouse is closed; the child waits for a
  -- pickup that never comes
  local function unshippable(warehouse)
    return { name = "shipping", steps = {
      { name = "pack", execute = function() return { box = 1 } end,
        compensate_retry = { max_attempts = 1 },
        compensate = function() if warehouse.closed then error("the warehouse is closed") end end },
      { name = "pickup", wait_for = "picked_up" } } }
  end

  -- A parent is compensated only once what its child did is undone too: a child whose
  -- compensation fails leaves the parent in the dead-letter queue with it, whether the parent
  -- turned back after the child succeeded (above) or was cancelled while the child ran.
  it("puts a cancelled parent in the dead-letter queue when its running child's compensation fails",
     function()
    local eng = H.new_engine()
    local log, warehouse = {}, { closed = true }
    eng:register(unshippable(warehouse))
    eng:register(order(log))
    local id = eng:start("order", { id = "o9" })
    eng:advance(1)
    local c = child_of(eng, id)
    assert.are.equal("waiting", H.step(eng:status(c.run_id), "pickup").status)
    eng:cancel(id)
    eng:run()
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("compensation_failed", st.reason)
    assert.are.equal("compensation_failed", H.step(st, "ship").status)
    assert.are.same({}, log)   -- charge is not undone past a step that could not be
    warehouse.closed = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal("compensated", eng:status(c.run_id).status)
    eng:dlq_retry(id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "refund" }, log)
  end)

  -- A child in the dead-letter queue as its parent is cancelled is no end: the parent waits,
  -- and once a person retries the child to success, the child is undone before the parent's
  -- earlier steps.
  -- The child sat in the dead-letter queue (severity 3) as its parent was cancelled: retried,
  -- it is undone from its failed step, which does not run forward again (label has no
  -- compensate: what it did would stay done), then the parent.
  it("undoes a dead-lettered child retried after its parent was cancelled, then the parent", function()
    local eng = H.new_engine()
    local log = {}
    local broken, labels = true, 0
    eng:register{ name = "shipping", steps = {
      { name = "pack", execute = function() log[#log + 1] = "pack" return { box = 1 } end,
        compensate = function() log[#log + 1] = "unpack" end },
      { name = "label", execute = function()
          labels = labels + 1
          if broken then error(require("mend").compensable("printer jam", { severity = 3 })) end
          return { t = 1 } end } } }
    eng:register(order(log))
    local id = eng:start("order", { id = "o10" })
    eng:run()
    local c = child_of(eng, id)
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    eng:cancel(id)
    eng:run()
    assert.are.equal("compensating", eng:status(id).status)
    broken = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal(1, labels)
    assert.are.equal("compensated", eng:status(c.run_id).status)
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "pack", "unpack", "refund" }, log)
    local said
    for _, e in ipairs(eng:history(c.run_id)) do
      if e.event == "operator" then said = e.detail end
    end
    assert.matches("dlq retry by .-: its parent is going back: the run is undone from its failed "
                   .. "step, not run forward", said)
  end)

  -- The parent's error says why it turned back (its cancel), as a run whose compensation was
  -- retried to its end does: not the error of a child's undoing that failed and was repaired.
  it("ends a cancelled parent compensated with its cancel as its error after its child's undoing failed again",
     function()
    local eng = H.new_engine()
    local log = {}
    local broken, closed = true, true
    eng:register{ name = "shipping", steps = {
      { name = "pack", execute = function() return { box = 1 } end,
        compensate_retry = { max_attempts = 1 },
        compensate = function()
          if closed then error("the warehouse is closed") end
          log[#log + 1] = "unpack"
        end },
      { name = "label", execute = function()
          if broken then error(require("mend").compensable("printer jam", { severity = 3 })) end
          return { t = 1 } end } } }
    eng:register(order(log))
    local id = eng:start("order", { id = "o11" })
    eng:run()
    local c = child_of(eng, id)
    eng:cancel(id)
    eng:run()
    local cancelled = eng:status(id).error
    assert.matches("^cancelled by ", cancelled)
    eng:dlq_retry(c.run_id)   -- undone from its failed step: the warehouse is still closed
    eng:run()
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    assert.are.equal("needs_attention", eng:status(id).status)
    closed = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal("compensated", eng:status(c.run_id).status)
    eng:dlq_retry(id)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal(cancelled, st.error)
    assert.are.same({ "unpack", "refund" }, log)
  end)

  it("puts a cancelled parent in the dead-letter queue when a branch's running child cannot be undone",
     function()
    local eng = H.new_engine()
    local log, warehouse = {}, { closed = true }
    eng:register(unshippable(warehouse))
    eng:register{ name = "order", steps = {
      { name = "charge", execute = function() return 1 end,
        compensate = function() log[#log + 1] = "refund" end },
      { name = "prepare", parallel = {
        { name = "ship", child = "shipping" },
        { name = "note", execute = function() return 2 end,
          compensate = function() log[#log + 1] = "unnote" end } } } } }
    local id = eng:start("order", {})
    eng:advance(1)
    local c = child_of(eng, id)
    assert.are.equal("waiting", H.step(eng:status(c.run_id), "pickup").status)
    eng:cancel(id)
    eng:run()
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    local st = eng:status(id)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("compensation_failed", st.reason)
    assert.are.same({}, log)   -- nothing undone past the branch whose child could not be
    warehouse.closed = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal("compensated", eng:status(c.run_id).status)
    eng:dlq_retry(id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "unnote", "refund" }, log)
  end)

  -- The engine that cancels may hold the run only as the store has it (mend cancel while no
  -- worker holds it): its group's branches were never started here.
  it("cancels a branch's running child with a run read back from the store, and undoes it first",
     function()
    local eng, db = H.new_engine()
    local log = {}
    local function register(e)
      e:register(shipping(log, { pickup = true }))
      e:register{ name = "order", steps = {
        { name = "charge", execute = function() return 1 end,
          compensate = function() log[#log + 1] = "refund" end },
        { name = "prepare", parallel = {
          { name = "ship", child = "shipping", input = function() return { order = "o11" } end },
          { name = "note", execute = function() return 2 end,
            compensate = function() log[#log + 1] = "unnote" end } } } } }
    end
    register(eng)
    local id = eng:start("order", {})
    eng:advance(1)
    local c = child_of(eng, id)
    assert.are.equal("waiting", H.step(eng:status(c.run_id), "pickup").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    register(eng2)
    assert.are.equal("cancelled", (eng2:cancel(id)))
    eng2:run()
    assert.are.equal("compensated", eng2:status(c.run_id).status)
    assert.are.equal("compensated", eng2:status(id).status)
    assert.are.same({ "pack o11", "unpack box-o11", "unnote", "refund" }, log)
  end)

  -- A child "rebel" (pack, whose compensation unpacks, then `mutiny`, then after) under a
  -- parent "boss"; runs them until the child waits no more. The parent's and the child's
  -- status.
  local function mutiny_of(eng, log, mutiny)
    eng:register { name = "rebel", steps = {
      { name = "pack", execute = function() log[#log + 1] = "pack" return 1 end,
        compensate = function() log[#log + 1] = "unpack" end },
      mutiny,
      { name = "after", execute = function() log[#log + 1] = "after" return 3 end } } }
    eng:register { name = "boss", steps = {
      { name = "spawn", child = "rebel", input = function(ctx) return { parent = ctx.run_id } end } } }
    local id = eng:start("boss", {})
    eng:run()
    eng:advance(120)
    return eng:status(id), eng:status(child_of(eng, id).run_id)
  end

  -- The child's own code cancels its parent: the cancel that cascades back to the child was
  -- refused (the child ran that code) with a warning, and the child ran on to its end.
  for _, after in ipairs { "returns", "sleeps" } do
    it("cancels a child whose code cancelled its parent once that code " .. after, function()
      local eng = H.new_engine()
      local log = {}
      local pst, cst = mutiny_of(eng, log, { name = "mutiny", execute = function(_, input)
          assert(eng:cancel(input.parent))
          log[#log + 1] = "mutiny"
          if after == "sleeps" then require("mend").sleep(60) end
          log[#log + 1] = "woke"
          return 2
        end })
      assert.are.equal("cancelled", pst.reason)
      assert.are.equal("cancelled", cst.reason, require("mend").json.encode(cst))
      assert.are.equal("compensated", cst.status)
      assert.are.same(after == "returns" and { "pack", "mutiny", "woke", "unpack" }
                      or { "pack", "mutiny", "unpack" }, log)
      assert.are.equal("pending", H.step(cst, "after").status)
    end)
  end

  -- The same from a lane's code: a parallel group's branch, a map item's step, a branch's
  -- `when`. The cancel cascaded back to the child was refused with a warning ("cannot be
  -- cancelled from its own code") and the child ran on to succeed.
  for _, lane in ipairs { "branch", "branch_sleeps", "item", "branch_when" } do
    it("cancels a child whose " .. lane .. " cancelled its parent", function()
      local eng = H.new_engine()
      local log = {}
      local function mutiny(_, input)
        assert(eng:cancel(input.parent))
        log[#log + 1] = "mutiny"
        if lane == "branch_sleeps" then require("mend").sleep(60) end
        return 2
      end
      local step
      if lane == "item" then
        step = { name = "mutiny", map = function() return { 1 } end,
                 step = { execute = function(ctx) return mutiny(ctx, ctx.input) end } }
      else
        step = { name = "mutiny", parallel = {
          { name = "b1", execute = lane ~= "branch_when" and mutiny or function() return 2 end,
            when = lane == "branch_when" and function(ctx)
              assert(eng:cancel(ctx.input.parent)); return true end or nil } } }
      end
      local pst, cst = mutiny_of(eng, log, step)
      assert.are.equal("cancelled", pst.reason)
      assert.are.equal("cancelled", cst.reason, json.encode(cst))
      assert.are.equal("compensated", cst.status)
      assert.are.same(lane == "branch_when" and { "pack", "unpack" } or { "pack", "mutiny", "unpack" }, log)
      assert.are.equal("pending", H.step(cst, "after").status)
    end)
  end

  -- A `when` of the child's last step cancels its parent and skips that step: the child ended
  -- `succeeded` in the same turn, before the kept cancel landed, and its done steps stayed done
  -- under a cancelled parent that no longer waited for it. The cancel lands as the `when`
  -- returns, as it does for a step's code, before its answer is acted on.
  it("cancels a child whose last step's when cancelled its parent and answered false", function()
    local eng = H.new_engine()
    local log = {}
    eng:register { name = "rebel", steps = {
      { name = "pack", execute = function() log[#log + 1] = "pack" return 1 end,
        compensate = function() log[#log + 1] = "unpack" end },
      { name = "last", when = function(ctx) assert(eng:cancel(ctx.input.parent)); return false end,
        execute = function() log[#log + 1] = "last" return 2 end } } }
    eng:register { name = "boss", steps = {
      { name = "spawn", child = "rebel", input = function(ctx) return { parent = ctx.run_id } end } } }
    local id = eng:start("boss", {})
    eng:run()
    local cst = eng:status(child_of(eng, id).run_id)
    assert.are.equal("cancelled", eng:status(id).reason)
    assert.are.equal("compensated", cst.status, json.encode(cst))
    assert.are.equal("cancelled", cst.reason)
    assert.are.equal("pending", H.step(cst, "last").status)
    assert.are.same({ "pack", "unpack" }, log)
  end)

  -- Code of the child other than a step's execute cancels its parent: a `when` (which answers
  -- true or raises), or an error's __tostring. A `when`'s answer is void once it cancelled (as
  -- a step's result is); the __tostring's cancel lands at the next turn, and the child, which
  -- turned back to compensate first for its step's error, drops it and compensates to its end
  -- (that compensation never ended: the engine spun).
  for _, how in ipairs { "when", "when_raises", "tostring" } do
    it("ends a child whose " .. how .. " cancelled its parent", function()
      local eng = H.new_engine()
      local log = {}
      local mutiny = { name = "mutiny", execute = function() log[#log + 1] = "mutiny" return 2 end }
      if how == "when" then
        mutiny.when = function(ctx) assert(eng:cancel(ctx.input.parent)); return false end
      elseif how == "when_raises" then
        mutiny.when = function(ctx) assert(eng:cancel(ctx.input.parent)); error("no") end
      else
        mutiny.execute = function(_, input)
          error(setmetatable({}, { __tostring = function()
            assert(eng:cancel(input.parent)); return "boom" end }))
        end
      end
      local pst, cst = mutiny_of(eng, log, mutiny)
      assert.are.equal("cancelled", pst.reason)
      assert.are.equal("compensated", cst.status)
      assert.are.equal(how == "tostring" and "error" or "cancelled", cst.reason)
      assert.are.same({ "pack", "unpack" }, log)
    end)
  end

  -- The worker that held both died with the parent's cancel asked of it; the next takes both
  -- in one claim: the parent's cancel, as it is restored, takes the child over to cancel it,
  -- and the claim's own restore of the child must not make it a second copy.
  it("undoes a child once when its parent's cancel was asked while no worker held them",
     function()
    local eng, log, db = setup{ pickup = true }
    local id = eng:start("order", { id = "o12" })
    eng:advance(1)
    local c = child_of(eng, id)
    H.close(eng)
    local eng2 = H.reopen(db)   -- without the workflows: it can only record the cancel
    assert.are.equal("recorded", (eng2:cancel(id)))
    H.close(eng2)
    local eng3 = H.reopen(db)
    eng3:register(shipping(log, { pickup = true }))
    eng3:register(order(log))
    eng3:recover()
    eng3:run()
    assert.are.equal("compensated", eng3:status(id).status)
    assert.are.equal("compensated", eng3:status(c.run_id).status)
    assert.are.same({ "pack o12", "unpack box-o12", "refund" }, log)
    local runs = {}
    for _, e in ipairs(eng3:history(c.run_id)) do
      if e.event == "run" then runs[#runs + 1] = (e.from or "") .. "->" .. e.to end
    end
    assert.are.same({ "->running", "running->compensating", "compensating->compensated" }, runs)
    assert.are.same({ "pending->running", "running->succeeded", "succeeded->compensating",
                      "compensating->compensated" }, H.transitions(eng3, c.run_id, "pack"))
  end)

  it("waits across a restart, and takes the end of a child that ended meanwhile", function()
    local eng, _, db = setup{ pickup = true }
    local id = eng:start("order", { id = "o5" })
    eng:advance(1)
    local c = child_of(eng, id)
    H.close(eng)
    local log2 = {}
    local eng2 = H.reopen(db)
    eng2:register(shipping(log2, { pickup = true }))
    eng2:register(order(log2))
    assert.are.equal(2, eng2:recover())
    eng2:signal(c.run_id, "picked_up", { at = "dock 3" })
    eng2:run()
    assert.are.equal("succeeded", eng2:status(c.run_id).status)
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.same({ at = "dock 3" }, H.step(eng2:status(id), "ship").result.pickup)
  end)

  -- The file changed under a waiting parent: its step now names another workflow. The child
  -- it started is still its child: a restart does not start the step's child again (which,
  -- with a key of another workflow's run, would be refused).
  it("keeps the child it started when its step names another workflow after a restart",
     function()
    local eng, _, db = setup{ pickup = true }
    local id = eng:start("order", { id = "o7" })
    eng:advance(1)
    local c = child_of(eng, id)
    H.close(eng)
    local log2 = {}
    local eng2 = H.reopen(db)
    eng2:register(shipping(log2, { pickup = true }))
    local renamed = shipping(log2, { pickup = true })
    renamed.name = "shipping_v2"
    eng2:register(renamed)
    local o = order(log2)
    o.steps[2].child = "shipping_v2"
    eng2:register(o)
    assert.are.equal(2, eng2:recover())
    eng2:signal(c.run_id, "picked_up", { at = "dock 4" })
    eng2:run()
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.same({ at = "dock 4" }, H.step(eng2:status(id), "ship").result.pickup)
  end)

  it("keeps waiting for a child in the dead-letter queue, and fails once it is resolved",
     function()
    local eng = H.new_engine()
    local log = {}
    eng:register{ name = "shipping", steps = {
      { name = "pack", retry = { max_attempts = 1 },
        execute = function() error(require("mend").retryable("carrier down")) end } } }
    eng:register(order(log))
    local id = eng:start("order", { id = "o6" })
    eng:run()
    local c = child_of(eng, id)
    assert.are.equal("needs_attention", c.status)
    assert.are.equal("running", eng:status(id).status)
    assert.are.equal("waiting", H.step(eng:status(id), "ship").status)
    eng:resolve(c.run_id, { note = "shipped by hand" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.matches("child run " .. c.run_id .. " resolved", H.step(st, "ship").error)
    assert.are.same({ "refund" }, log)
  end)

  it("puts the parent in the dead-letter queue when its child's compensation fails", function()
    local eng = H.new_engine()
    local log = {}
    local broken = true
    eng:register{ name = "shipping", steps = {
      { name = "pack", execute = function() return { box = 1 } end,
        compensate_retry = { max_attempts = 1 },
        compensate = function() if broken then error("the warehouse is closed") end end } } }
    eng:register(order(log))
    local id = eng:start("order", { id = "o8", fail_last = true })
    eng:run()
    local st = eng:status(id)
    local c = st.children[1]
    assert.are.equal("needs_attention", eng:status(c.run_id).status)
    assert.are.equal("compensation_failed", eng:status(c.run_id).reason)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("compensation_failed", st.reason)
    assert.are.equal("compensation_failed", H.step(st, "ship").status)
    assert.matches("child run " .. c.run_id .. " needs_attention", H.step(st, "ship").error)
    assert.are.same({}, log)   -- charge is not undone past a step that could not be
    -- the child repaired and retried; then the parent, whose compensation finds it undone
    broken = false
    eng:dlq_retry(c.run_id)
    eng:run()
    assert.are.equal("compensated", eng:status(c.run_id).status)
    eng:dlq_retry(id)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "refund" }, log)
  end)

  it("adopts a run started by hand with the child's key, ended or not", function()
    for _, first in ipairs { true, false } do
      local eng, log = setup()
      local id = eng:start("order", { id = "o7" })
      local cid = eng:start("shipping", { order = "by-hand" }, { key = id .. "/ship" })
      if first then eng:advance(1) end   -- else both go side by side
      eng:run()
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(cid, st.children[1].run_id)
      assert.are.same({ tracking = "trk-by-hand" }, H.step(st, "ship").result.label)
      assert.are.same({ "pack by-hand" }, log)
    end
  end)

  it("refuses bad definitions, and fails the step for a workflow not loaded", function()
    local eng = H.new_engine()
    local ok, err = pcall(eng.register, eng, H.one_step("a", { child = "x", execute = function() end }))
    assert.is_false(ok)
    assert.matches("child cannot go with execute", err)
    ok, err = pcall(eng.register, eng, H.one_step("b", { child = "x", compensate = function() end }))
    assert.is_false(ok)
    assert.matches("child and compensate cannot go together", err)
    ok, err = pcall(eng.register, eng, H.one_step("c", { execute = function() end, input = function() end }))
    assert.is_false(ok)
    assert.matches("input goes only with child", err)
    eng:register(H.one_step("lonely", { child = "nowhere" }))
    local id = eng:start("lonely", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("failed", st.status)
    assert.matches('child nowhere could not start: no workflow named "nowhere" is loaded',
                   H.step(st, "work").error)
  end)

  -- Workers on several machines serve different directories: the one that takes the parent
  -- may lack the child's file. The database keeps the child's script (a run of it was made
  -- from its file elsewhere): the child starts on that version, as a run whose file is not
  -- here is carried on from its kept script, rather than failing its step and the parent.
  it("starts a child whose file is not here on the newest version the database keeps", function()
    local dir = H.tmp_dir()
    local kid = H.write_file(dir, "kid.lua", [[return { name = "kid", steps = {
      { name = "k", execute = function(_, input) return "kid " .. input.n end } } }]])
    local parent = H.write_file(dir, "parent.lua", [[return { name = "parent", steps = {
      { name = "ship", child = "kid", input = function() return { n = 7 } end } } }]])
    local elsewhere, db = H.new_engine()
    elsewhere:load(kid)
    elsewhere:start("kid", { n = 1 })
    elsewhere:run()
    H.close(elsewhere)
    local here = H.reopen(db)
    here:load(parent)
    local id = here:start("parent", {})
    here:run()
    local st = here:status(id)
    assert.are.equal("succeeded", st.status, require("mend").json.encode(st))
    assert.are.same({ k = "kid 7" }, H.step(st, "ship").result)
  end)
end)

-- With real processes.
local mend_cmd = H.mend_cmd

local worker = H.spawn_worker

local status_json = H.status_json

local SHIPPING = [[
return { name = "shipping", steps = {
  { name = "pack", execute = function(ctx, input) return { box = "box-" .. input.order } end,
    compensate = function(ctx, r) ctx:log("unpacked %s", r.box) end },
  { name = "pickup", wait_for = "picked_up" },
} }
]]

local ORDER = [[
local mend = require "mend"
return { name = "order", steps = {
  { name = "charge", execute = function() return { charged = 5 } end,
    compensate = function(ctx) ctx:log("refunded") end },
  { name = "ship", child = "shipping", input = function(ctx) return { order = ctx.input.id } end },
  { name = "confirm", wait_for = "confirmed" },
  { name = "close", execute = function(ctx)
      if ctx.results.confirm.ok ~= true then error(mend.fatal("not confirmed")) end
      return "closed"
    end },
} }
]]

describe("child runs with real workers", function()
  after_each(H.cleanup)

  local function setup()
    local dir = H.tmp_dir()
    H.write_file(dir, "shipping.lua", SHIPPING)
    H.write_file(dir, "order.lua", ORDER)
    return dir, H.new_db(dir, "c.db"), dir .. "/worker.log"
  end

  local function start(db, dir, input)
    local rc, out = mend_cmd(db, "start order --workflows " .. q(dir) .. " --input '" .. input .. "'")
    assert.are.equal(0, rc, out)
    return out:match("(%S+)")
  end

  local function waiting_child(db, id)
    local c
    H.wait_for("the child's wait", function()
      local st = status_json(db, id)
      c = st.children and st.children[1]
      return c and H.step(status_json(db, c.run_id), "pickup").status == "waiting"
    end, 10)
    return c.run_id
  end

  it("wakes the parent when a child ends in another process; status shows the links", function()
    local dir, db, log = setup()
    local id = start(db, dir, '{"id":"o1"}')
    local pid = worker(db, dir, log)
    local child = waiting_child(db, id)
    local rc, out = mend_cmd(db, "status " .. id)
    assert.matches("due: ship waiting for child run " .. child .. " %(shipping%), no timeout", out)
    assert.matches("children:\n  ship%s+" .. child .. "%s+shipping%s+running", out)
    rc, out = mend_cmd(db, "status " .. child)
    assert.matches("parent:\n  " .. id .. " %(step ship%)", out)
    H.stop_worker(pid)
    -- the child's event is sent while no worker runs: the next one carries both on
    rc, out = mend_cmd(db, "signal " .. child .. " picked_up")
    assert.are.equal(0, rc, out)
    pid = worker(db, dir, log)
    H.wait_for("the parent's next wait", function()
      return H.step(status_json(db, id), "confirm").status == "waiting"
    end, 10)
    rc, out = mend_cmd(db, "signal " .. id .. [[ confirmed --data '{"ok":true}']])
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.same({ box = "box-o1" }, H.step(st, "ship").result.pack)
    assert.are.equal(child, st.children[1].run_id)
    assert.are.equal(id, status_json(db, child).parent_run)
  end)

  it("compensates the child with its parent, and cancels a running child with its parent",
     function()
    local dir, db, log = setup()
    local id = start(db, dir, '{"id":"o2"}')
    local pid = worker(db, dir, log)
    local child = waiting_child(db, id)
    assert.are.equal(0, (mend_cmd(db, "signal " .. child .. " picked_up")))
    H.wait_for("the parent's next wait", function()
      return H.step(status_json(db, id), "confirm").status == "waiting"
    end, 10)
    assert.are.equal(0, (mend_cmd(db, "signal " .. id .. [[ confirmed --data '{"ok":false}']])))
    local rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    assert.are.equal(3, rc, out .. H.read(log))
    assert.are.equal("compensated", status_json(db, child).status)
    assert.are.equal("parent_compensated", status_json(db, child).reason)
    rc, out = mend_cmd(db, "history " .. child)
    assert.matches("unpacked box%-o2", out)

    -- cancel: the parent waits for a running child
    local id2 = start(db, dir, '{"id":"o3"}')
    local child2 = waiting_child(db, id2)
    rc, out = mend_cmd(db, "cancel " .. id2)
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id2 .. " --timeout 10")
    assert.are.equal(3, rc, out .. H.read(log))
    rc, out = mend_cmd(db, "wait " .. child2 .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    assert.are.equal("cancelled", status_json(db, child2).reason)
  end)
end)
