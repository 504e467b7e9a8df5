-- A run retried from the dead-letter queue takes events again, and prune on a virtual clock
-- measures runs by that clock: what a review of the failing-run refusal and of the runs' times
-- on a virtual clock showed.
local H = require "spec.helper"

describe("a run retried from the dead-letter queue", function()
  after_each(H.cleanup)

  -- A group's branch failed with severity 3 (a dead letter, nothing compensated); a person
  -- retries it and it succeeds: the run runs again and its other branch waits for an event.
  -- The group's step still says `failed` in memory and in the store: it must not make the run
  -- "failing" (every event refused, the run waiting for ever).
  it("takes the event its group's branch waits for once the retried branch succeeds", function()
    local mend = require "mend"
    local down = true
    local eng = H.new_engine()
    eng:register { name = "grp", steps = {
      { name = "g", parallel = {
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end },
        { name = "b", wait_for = "go" } } },
      { name = "after", execute = function() return 2 end } } }
    local id = eng:start("grp", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    down = false
    eng:dlq_retry(id)
    eng:run()
    assert.are.equal("running", eng:status(id).status)
    local ok, err = pcall(eng.signal, eng, id, "go")
    assert.is_true(ok, err)
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)
end)

-- A branch failed with severity 3 after its group's other branch had begun waiting: the failure
-- stopped that branch (back to pending). The retry ran the failed branch as if it were a step
-- of the run's own, then went past the group: the stopped branch never ran again, the group
-- stayed failed with no result, its event was never taken, and the run "succeeded".
describe("a group's branch retried from the dead-letter queue", function()
  after_each(H.cleanup)

  local function group_run(eng, db)
    local mend = require "mend"
    local down = true
    local def = { name = "grp", steps = {
      { name = "g", parallel = {
        { name = "b", wait_for = "go" },
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end } } },
      { name = "after", execute = function(ctx) return ctx.results.g end } } }
    eng:register(def)
    local id = eng:start("grp", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    assert.are.equal("pending", H.step(eng:status(id), "g/b").status)
    down = false
    return id, def
  end

  local function carried_on(eng, id)
    eng:dlq_retry(id)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("running", st.status)
    assert.are.equal("waiting", H.step(st, "g/b").status)
    assert.are.equal("running", H.step(st, "g").status)
    assert.are.equal("pending", H.step(st, "after").status)
    eng:signal(id, "go", { gold = 5 })
    eng:run()
    st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("succeeded", H.step(st, "g").status)
    assert.are.same({ a = 1, b = { gold = 5 } }, H.step(st, "after").result)
  end

  it("runs its group's stopped branch again and settles the group, in the same engine", function()
    local eng = H.new_engine()
    carried_on(eng, (group_run(eng)))
  end)

  it("does so in another engine that takes the run over (a server's retry)", function()
    local eng, db = H.new_engine()
    local id, def = group_run(eng)
    H.close(eng)
    local other = H.reopen(db)
    other:register(def)
    carried_on(other, id)
  end)
end)

-- The group stopped its branch's child (cancelled: the branch failed with it) as another branch
-- failed with severity 3. The retry ran the branch again, which found its old child by the
-- child's key, ended already and its end heard: no end came, and the run waited for ever.
describe("a group's child branch retried from the dead-letter queue", function()
  after_each(H.cleanup)

  local function kids(eng)
    local out = {}
    for _, r in ipairs(eng:runs{}) do
      if r.workflow == "kid" then out[r.status] = (out[r.status] or 0) + 1 end
    end
    return out
  end

  local function check(eng, id)
    local st = eng:status(id)
    assert.are.equal("running", st.status)
    assert.are.equal("waiting", H.step(st, "g/b").status)
    assert.are.same({ failed = 1, running = 1 }, kids(eng))
    local new
    for _, c in ipairs(st.children) do
      if eng:status(c.run_id).status == "running" then new = c.run_id end
    end
    eng:signal(new, "go", { n = 7 })
    eng:run()
    st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ w = { n = 7 } }, H.step(st, "g/b").result)
    assert.are.same({ failed = 1, succeeded = 1 }, kids(eng))
  end

  local function setup(eng)
    local mend = require "mend"
    local down = true
    local defs = {
      { name = "kid", steps = { { name = "w", wait_for = "go" } } },
      { name = "grp", steps = { { name = "g", parallel = {
        { name = "b", child = "kid" },
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end } } } } } }
    for _, d in ipairs(defs) do eng:register(d) end
    local id = eng:start("grp", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    assert.are.same({ failed = 1 }, kids(eng))
    down = false
    return id, defs
  end

  it("starts a new child for it, which its end is heard of", function()
    local eng = H.new_engine()
    local id = setup(eng)
    eng:dlq_retry(id)
    eng:run()
    check(eng, id)
  end)

  it("does so in another engine that takes the run over, carried on after a restart", function()
    local eng, db = H.new_engine()
    local id, defs = setup(eng)
    H.close(eng)
    local other = H.reopen(db)
    for _, d in ipairs(defs) do other:register(d) end
    other:dlq_retry(id)
    other:run()
    H.close(other)
    other = H.reopen(db)   -- the branch waits for its new child across a restart
    for _, d in ipairs(defs) do other:register(d) end
    other:recover()
    other:run()
    check(other, id)
  end)
end)

-- A map's item failed with severity 3: the retry set the map pending with its item still
-- failed, and the map failed again at once, nothing run: the retry could never help.
describe("a map's item retried from the dead-letter queue", function()
  after_each(H.cleanup)

  for _, other in ipairs { false, true } do
    it("runs again, and the map's other items" .. (other and ", in another engine" or ""),
       function()
      local mend = require "mend"
      local down, ran = true, {}
      local def = { name = "m", steps = {
        { name = "items", map = function() return { 1, 2, 3 } end, max_concurrency = 1,
          step = { execute = function(_, item)
            ran[#ran + 1] = item
            if down and item == 2 then error(mend.compensable("x", { severity = 3 })) end
            return item * 10
          end } },
        { name = "after", execute = function(ctx) return ctx.results.items end } } }
      local eng, db = H.new_engine()
      eng:register(def)
      local id = eng:start("m", {})
      eng:run()
      assert.are.equal("needs_attention", eng:status(id).status)
      down = false
      if other then
        H.close(eng)
        eng = H.reopen(db)
        eng:register(def)
      end
      eng:dlq_retry(id)
      eng:run()
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status)
      assert.are.same({ 10, 20, 30 }, H.step(st, "after").result)
      assert.are.same({ 1, 2, 2, 3 }, ran)
    end)
  end
end)

describe("prune on a virtual clock", function()
  after_each(H.cleanup)

  -- A simulation of a month: run a ends on day 0, run b on day 28, prune on day 30 of runs
  -- older than a week: b ended two days ago by the clock the runs were on, and stays.
  it("keeps a run that ended two virtual days ago when it prunes runs older than a week",
     function()
    local eng = H.new_engine()
    eng:register { name = "q", steps = { { name = "s", execute = function() return 1 end } } }
    local a = eng:start("q", {})
    eng:run()
    eng:advance(28 * 86400)
    local b = eng:start("q", {})
    eng:run()
    eng:advance(2 * 86400)
    local r = eng:prune { older_than = 7 * 86400 }
    assert.are.equal(1, r.runs.succeeded)
    assert.is_nil(eng:status(a))
    assert.are.equal("succeeded", eng:status(b).status)
  end)
end)

-- Review of rc31: a step's children are found by generation keys (<parent>/<step>, then
-- <parent>/<step>/2, ...), which other runs may hold.
describe("a child step's children found by their keys", function()
  local mend = require "mend"
  after_each(H.cleanup)

  local function kids(eng)
    local out = {}
    for _, r in ipairs(eng:runs{}) do
      if r.workflow == "kid" then out[#out + 1] = r end
    end
    return out
  end

  it("cancels the child the step waits for, not a run started by hand with key /2", function()
    local eng = H.new_engine()
    eng:register { name = "kid", steps = { { name = "w", wait_for = "go" } } }
    eng:register { name = "par", steps = { { name = "c", child = "kid" } } }
    local id = eng:start("par", {})
    eng:run()
    local real = eng:status(id).children[1].run_id
    local other = eng:start("kid", {}, { key = id .. "/c/2" })
    eng:run()
    eng:cancel(id)
    eng:run()
    assert.are.equal("running", eng:status(other).status)
    assert.are_not.equal("running", eng:status(real).status)
  end)

  it("undoes the child the step started, not a run started by hand with key /2", function()
    local eng = H.new_engine()
    local undone = {}
    eng:register { name = "kid", steps = {
      { name = "x", execute = function() return 1 end,
        compensate = function(ctx) undone[#undone + 1] = ctx.run_id end },
      { name = "w", wait_for = "go" } } }
    eng:register { name = "par", steps = {
      { name = "c", child = "kid" },
      { name = "after", execute = function() error(mend.compensable("no")) end } } }
    local id = eng:start("par", {})
    eng:run()
    local real = eng:status(id).children[1].run_id
    local other = eng:start("kid", {}, { key = id .. "/c/2" })
    eng:run()
    eng:signal(other, "go", {})
    eng:signal(real, "go", {})
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ real }, undone)
    assert.are.equal("succeeded", eng:status(other).status)
  end)

  -- A plain step's name may hold a slash: step "g/b/2" has the key the branch g/b's second
  -- child takes.
  it("does not give a retried branch's new child to a step named <group>/<branch>/2", function()
    local eng = H.new_engine()
    local down = true
    eng:register { name = "kid", steps = { { name = "w", wait_for = "go" } } }
    eng:register { name = "kid2", steps = { { name = "w", execute = function()
      return "own"
    end } } }
    eng:register { name = "grp", steps = {
      { name = "g", parallel = {
        { name = "b", child = "kid" },
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end } } },
      { name = "g/b/2", child = "kid2" } } }
    local id = eng:start("grp", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    down = false
    eng:dlq_retry(id)
    eng:run()
    local new
    for _, k in ipairs(kids(eng)) do if k.status == "running" then new = k.id end end
    eng:signal(new, "go", { from = "branch" })
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ w = { from = "branch" } }, H.step(st, "g/b").result)
    assert.are.same({ w = "own" }, H.step(st, "g/b/2").result)
  end)

  it("cancels the retried branch's new child with its parent, the old one as it was", function()
    local eng = H.new_engine()
    local down = true
    eng:register { name = "kid", steps = { { name = "w", wait_for = "go" } } }
    eng:register { name = "grp", steps = { { name = "g", parallel = {
      { name = "b", child = "kid" },
      { name = "a", execute = function()
        if down then error(mend.compensable("x", { severity = 3 })) end
        return 1
      end } } } } }
    local id = eng:start("grp", {})
    eng:run()
    local old = kids(eng)[1].id
    down = false
    eng:dlq_retry(id)
    eng:run()
    local new
    for _, k in ipairs(kids(eng)) do if k.status == "running" then new = k.id end end
    assert.is_not_nil(new)
    eng:cancel(id)
    eng:run()
    assert.are.equal("failed", eng:status(old).status)
    assert.are_not.equal("running", eng:status(new).status)
    assert.are_not.equal("running", eng:status(id).status)
  end)

  -- The key is built in a buffer of 400 bytes: a long branch name makes every generation's key
  -- the same truncated one, and the retried branch finds its old child again.
  it("starts a new child for a retried branch whose name is long", function()
    local eng = H.new_engine()
    local down = true
    local long = string.rep("b", 390)
    eng:register { name = "kid", steps = { { name = "w", wait_for = "go" } } }
    eng:register { name = "grp", steps = {
      { name = "g", parallel = {
        { name = long, child = "kid" },
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end } } } } }
    local id = eng:start("grp", {})
    eng:run()
    assert.are.equal("needs_attention", eng:status(id).status)
    down = false
    eng:dlq_retry(id)
    eng:run()
    local new
    for _, k in ipairs(kids(eng)) do if k.status == "running" then new = k.id end end
    assert.is_not_nil(new)   -- a new child was started
    eng:signal(new, "go", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)
end)
