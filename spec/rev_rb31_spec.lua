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

-- `mend dlq retry` of a map's item killed right after one of its commits (MEND_FAILPOINT, a
-- build with failpoints): the engine that recovers the run must carry the retry on. The map's
-- `running` is committed a batch before its item's row says anything but `failed`.
describe("rev-rb31: a map's item retried, the retry killed after a commit", function()
  after_each(H.cleanup)

  it("runs the item again in the engine that recovers the run", function()
    local dir = H.tmp_dir()
    local file = H.write_file(dir, "mapc.lua", ([[
local mend = require "mend"
local function log(s) local f = io.open(%q, "a"); f:write(s, "\n"); f:close() end
return { name = "mapc", steps = {
  { name = "items", map = function() return { 1, 2, 3 } end, max_concurrency = 1,
    step = { execute = function(_, item)
      log(tostring(item))
      local down = io.open(%q)
      if down then down:close() end
      if down and item == 2 then error(mend.compensable("x", { severity = 3 })) end
      return item * 10
    end } } } }
]]):format(dir .. "/ran", dir .. "/down"))
    for n = 1, 3 do
      local eng, db = H.new_engine()
      eng:load(file)
      H.write_file(dir, "down", "")
      local id = eng:start("mapc", {})
      eng:run()
      assert.are.equal("needs_attention", eng:status(id).status)
      H.close(eng)
      os.remove(dir .. "/down")
      os.remove(dir .. "/ran")
      local rc, out = H.shell(("MEND_FAILPOINT=after_commit:%d %s dlq retry %s --db %s")
        :format(n, H.MEND, id, H.quote(db)))
      assert.are.equal(137, rc, out)
      eng = H.reopen(db)
      eng:load(file)
      eng:recover()
      eng:run()
      local st = eng:status(id)
      assert.are.equal("succeeded", st.status, "killed after commit " .. n .. ": " .. H.read(dir .. "/ran"))
      H.close(eng)
    end
  end)
end)
