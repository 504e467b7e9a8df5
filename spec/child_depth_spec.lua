-- How deep child runs nest: a workflow whose step starts a run of itself ends at
-- MEND_CHILD_DEPTH_MAX (32) instead of filling the database with runs; the refused step fails
-- with a fatal error naming the depth and the chain, and every run of the chain compensates.
local H = require "spec.helper"

-- nest: a step to undo, then a child run of itself while `when` says so (limit nil: always).
local function nest(log, limit)
  return { name = "nest", steps = {
    { name = "mark", execute = function(_, input) return { n = input.n } end,
      compensate = function(_, r) log[#log + 1] = r.n end },
    { name = "deeper", child = "nest",
      when = function(ctx) return limit == nil or ctx.input.n < limit end,
      input = function(ctx) return { n = ctx.input.n + 1 } end },
  } }
end

-- The runs of the chain from id down, their statuses in order.
local function chain(eng, id)
  local out = {}
  while id do
    local st = eng:status(id)
    out[#out + 1] = st
    id = st.children and st.children[1] and st.children[1].run_id
  end
  return out
end

describe("child runs", function()
  after_each(H.cleanup)

  it("nest 32 deep below the run that starts them", function()
    local eng = H.new_engine()
    eng:register(nest({}, 32))
    local id = eng:start("nest", { n = 0 })
    eng:run()
    local runs = chain(eng, id)
    assert.are.equal(33, #runs)
    for _, st in ipairs(runs) do assert.are.equal("succeeded", st.status) end
  end)

  it("refuse a 33rd level with a fatal error naming the depth and chain, and compensate",
    function()
    local eng = H.new_engine()
    local log = {}
    eng:register(nest(log))
    local id = eng:start("nest", { n = 0 })
    eng:run()
    local runs = chain(eng, id)
    assert.are.equal(33, #runs)
    for _, st in ipairs(runs) do assert.are.equal("compensated", st.status) end
    local err = runs[33].error
    assert.matches("child nest refused: it would be at depth 33 of child runs, past the bound "
                   .. "of 32 (chain: nest -> nest -> nest -> ... -> nest -> nest -> nest -> nest)",
                   err, 1, true)
    assert.are.equal(33, #log)
    assert.are.equal(32, log[1])   -- the deepest undone first
    assert.are.equal(0, log[33])
  end)
end)
