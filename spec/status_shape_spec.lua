-- What eng:status(id) returns (and `mend status --json` and the HTTP API's run print): the
-- run's fields and its steps', each with its value, for a run that ended, a run held here with
-- an attempt in flight and steps not begun, a parent with its children, and no run. Pinned so
-- that the way status is read may change and what it answers may not.
local H = require "spec.helper"
local mend = require "mend"

local THREE = {
  name = "three", steps = {
    { name = "a", execute = function() return { x = 1 } end },
    { name = "b", execute = function(ctx) return { y = ctx.results.a.x + 1 } end },
    { name = "c", execute = function() return "done" end } } }

local NAP = {
  name = "nap", steps = {
    { name = "first", execute = function() return 1 end },
    { name = "sleepy", execute = function() mend.sleep(60) return 2 end },
    { name = "last", execute = function() return 3 end } } }

local KID = { name = "kid", steps = { { name = "k", wait_for = "go", timeout = 3600 } } }
local PARENT = { name = "parent", steps = { { name = "spawn", child = "kid" } } }

local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe("eng:status", function()
  after_each(H.cleanup)

  it("gives an ended run's fields and its steps'", function()
    local eng = H.new_engine()
    eng:register(THREE)
    local id = eng:start("three", { k = 1 }, { key = "kk" })
    eng:run()
    local st = eng:status(id)
    assert.are.same({ "attention", "created", "id", "input", "key", "source", "status", "steps",
                      "updated", "version", "workflow" }, keys(st))
    assert.are.equal(id, st.id)
    assert.are.equal("three", st.workflow)
    assert.are.equal("succeeded", st.status)
    assert.are.equal("kk", st.key)
    assert.are.same({ k = 1 }, st.input)
    assert.are.equal(false, st.attention)
    assert.are.equal("number", type(st.created))
    assert.is_true(st.updated >= st.created)
    assert.are.equal(3, #st.steps)
    local results = { { x = 1 }, { y = 2 }, "done" }
    for i, s in ipairs(st.steps) do
      assert.are.same({ "attempts", "comp_attempts", "custom_key", "idempotency_key", "idx", "name",
                        "result", "slept", "status", "updated" }, keys(s))
      assert.are.equal(i - 1, s.idx)
      assert.are.equal(({ "a", "b", "c" })[i], s.name)
      assert.are.equal("succeeded", s.status)
      assert.are.equal(1, s.attempts)
      assert.are.equal(0, s.comp_attempts)
      assert.are.equal(false, s.custom_key)
      assert.are.equal(false, s.slept)
      assert.are.equal(id .. "/" .. s.name, s.idempotency_key)
      assert.are.same(results[i], s.result)
      assert.are.equal("number", type(s.updated))
    end
  end)

  it("gives a run held here: owner, lease, holder, attempt in flight, steps not begun", function()
    local eng = H.new_engine()
    eng:register(NAP)
    local id = eng:start("nap", {})
    eng:advance(1)
    local st = eng:status(id)
    assert.are.same({ "attention", "created", "held_by", "id", "input", "lease_until", "owner",
                      "source", "status", "steps", "updated", "version", "workflow" }, keys(st))
    assert.are.equal("running", st.status)
    assert.are.equal(st.owner, st.held_by)
    assert.is_true(st.lease_until > st.created)
    assert.are.same({ "succeeded", "running", "pending" },
                    { st.steps[1].status, st.steps[2].status, st.steps[3].status })
    assert.are.same({ 1, 1, 0 },
                    { st.steps[1].attempts, st.steps[2].attempts, st.steps[3].attempts })
    assert.are.same({ "attempts", "comp_attempts", "custom_key", "idempotency_key", "idx", "name",
                      "slept", "status", "updated" }, keys(st.steps[2]))
    assert.are.same({ "attempts", "comp_attempts", "custom_key", "idempotency_key", "idx", "name",
                      "slept", "status", "updated" }, keys(st.steps[3]))
    assert.are.equal(id .. "/last", st.steps[3].idempotency_key)
    assert.are.equal(st.created, st.steps[3].updated)   -- not begun: the run's start
  end)

  it("lists a parent's children, and gives nil for no run", function()
    local eng = H.new_engine()
    eng:register(KID)
    eng:register(PARENT)
    local id = eng:start("parent", {})
    eng:advance(1)
    local st = eng:status(id)
    assert.are.equal(1, #st.children)
    local c = st.children[1]
    assert.are.same({ "run_id", "status", "step", "workflow" }, keys(c))
    assert.are.same({ "spawn", "kid", "running" }, { c.step, c.workflow, c.status })
    assert.are.equal("waiting", st.steps[1].status)
    assert.is_nil(eng:status("nosuchrun"))
  end)
end)
