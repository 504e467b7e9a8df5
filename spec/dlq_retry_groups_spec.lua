-- A group's branch or a map's item retried from the dead-letter queue: the order it is undone in, a
-- crash in the middle of the retry, fresh attempts for every failed branch, the error shown.
local H = require "spec.helper"

describe("compensation after a retried branch or item", function()
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
describe("a map's item retried, the retry killed after a commit", function()
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
      assert.are.equal("succeeded", st.status,
                       "killed after commit " .. n .. ": " .. H.read(dir .. "/ran"))
      H.close(eng)
    end
  end)
end)

-- Branch a fails with severity 3; branch b, listed after it and in flight, fails after it
-- (fatal). The group fails with a's failure: a dead letter. README: "the step that failed with
-- severity 3, with fresh attempts"; group_forward: "its branches that failed get fresh
-- attempts". Only the last failed branch by index (the fail_step a rebuilt run finds) gets
-- them: a goes on from its attempt 1 and runs out of attempts one short.
describe("a group's severity-3 branch retried beside another failed branch", function()
  after_each(H.cleanup)

  for _, other in ipairs { false, true } do
    it("gets fresh attempts" .. (other and ", reopened" or ""), function()
      local mend = require "mend"
      local calls, down = 0, true
      local def = { name = "g2", steps = {
        { name = "g", parallel = {
          { name = "a", retry = { max_attempts = 3, initial = 0, jitter = 0 },
            execute = function()
              calls = calls + 1
              if calls == 1 then error(mend.compensable("x", { severity = 3 })) end
              if calls < 4 then error(mend.retryable("flaky")) end
              return "a"
            end },
          { name = "b", execute = function()
            if down then error(mend.fatal("first")) end
            return "b"
          end } } } } }
      local eng, db = H.new_engine()
      eng:register(def)
      local id = eng:start("g2", {})
      eng:run()
      local st = eng:status(id)
      assert.are.equal("needs_attention", st.status)
      assert.are.equal("failed", H.step(st, "g/b").status)
      assert.are.equal("g/a", H.dlq_entry(eng, id).step)
      down = false
      if other then
        H.close(eng)
        eng = H.reopen(db)
        eng:register(def)
      end
      eng:dlq_retry(id)
      eng:run()
      st = eng:status(id)
      assert.are.equal(4, calls)
      assert.are.equal("succeeded", st.status, tostring(st.error))
      assert.are.equal(3, H.step(st, "g/a").attempts)
    end)
  end
end)

-- While the retried group goes on, its step is `running`: the error of the failure the person
-- retried is not its error any more (status, GET /api/v1/runs/{id}, the dashboard).
describe("a retried group going on", function()
  after_each(H.cleanup)

  it("shows no error of the failure retried", function()
    local mend = require "mend"
    local down = true
    local eng = H.new_engine()
    eng:register { name = "grp", steps = {
      { name = "g", parallel = {
        { name = "b", wait_for = "go" },
        { name = "a", execute = function()
          if down then error(mend.compensable("x", { severity = 3 })) end
          return 1
        end } } } } }
    local id = eng:start("grp", {})
    eng:run()
    down = false
    eng:dlq_retry(id)
    eng:run()
    local g = H.step(eng:status(id), "g")
    assert.are.equal("running", g.status)
    assert.is_nil(g.error)
  end)
end)
