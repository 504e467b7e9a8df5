-- Review of rb31: a group's branch or a map's item retried from the dead-letter queue.
local H = require "spec.helper"

describe("rev-rb31: compensation after a retried branch or item", function()
  after_each(H.cleanup)

  -- Item 1 fails with severity 3 while item 2's attempt is in flight (it succeeds after):
  -- completion order 2. The retry runs items 1 and 3: completion order 2, 1, 3. A later step
  -- fails: SPEC 12 undoes in reverse order of completion, 3, 1, 2.
  for _, other in ipairs { false, true } do
    it("undoes a map's items in reverse order of completion" .. (other and ", reopened" or ""),
       function()
      local mend = require "mend"
      local down, undone = true, {}
      local def = { name = "m", steps = {
        { name = "items", map = function() return { 1, 2, 3 } end, max_concurrency = 2,
          step = { execute = function(_, item)
            if down and item == 1 then error(mend.compensable("x", { severity = 3 })) end
            return item
          end, compensate = function(_, res) undone[#undone + 1] = res end } },
        { name = "boom", execute = function() error(mend.fatal("no")) end } } }
      local eng, db = H.new_engine()
      eng:register(def)
      local id = eng:start("m", {})
      eng:run()
      assert.are.equal("needs_attention", eng:status(id).status)
      assert.are.equal("succeeded", H.step(eng:status(id), "items/2").status)
      down = false
      if other then
        H.close(eng)
        eng = H.reopen(db)
        eng:register(def)
      end
      eng:dlq_retry(id)
      eng:run()
      assert.are.equal("compensated", eng:status(id).status)
      assert.are.same({ 3, 1, 2 }, undone)
    end)
  end

  for _, other in ipairs { false, true } do
    it("undoes a group's branches in reverse order of completion" .. (other and ", reopened" or ""),
       function()
      local mend = require "mend"
      local down, undone = true, {}
      local def = { name = "g", steps = {
        { name = "g", parallel = {
          { name = "a", execute = function()
            if down then error(mend.compensable("x", { severity = 3 })) end
            return "a"
          end, compensate = function(_, res) undone[#undone + 1] = res end },
          { name = "b", execute = function() return "b" end,
            compensate = function(_, res) undone[#undone + 1] = res end } } },
        { name = "boom", execute = function() error(mend.fatal("no")) end } } }
      local eng, db = H.new_engine()
      eng:register(def)
      local id = eng:start("g", {})
      eng:run()
      assert.are.equal("needs_attention", eng:status(id).status)
      assert.are.equal("succeeded", H.step(eng:status(id), "g/b").status)
      down = false
      if other then
        H.close(eng)
        eng = H.reopen(db)
        eng:register(def)
      end
      eng:dlq_retry(id)
      eng:run()
      assert.are.equal("compensated", eng:status(id).status)
      assert.are.same({ "a", "b" }, undone)
    end)
  end
end)
