-- What a sandbox charges for the work of C functions that no count hook sees, as a workflow
-- relies on it: an ordinary call goes through, and a call refused says what in it is too dear.
-- The hostile corpus (tests/hostile, ctest c_hostile) holds the loops of such calls to their
-- budget; this spec holds the calls a workflow makes.
local H = require "spec.helper"

local function run_step(body)
  local eng = H.new_engine({ sandbox = true, clock = "virtual", instruction_budget = 1e9 })
  eng:load(H.write_file(H.tmp_dir(), "w.lua", ([[
return { name = "w", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
%s
end } } }]]):format(body)))
  local id = eng:start("w", {})
  eng:run()
  return eng:status(id)
end

describe("string.gsub in a sandbox", function()
  after_each(H.cleanup)

  it("takes a replacement with escapes on a text of 1 MB whose pattern is a single byte", function()
    local st = run_step([[
  local s = ("50% off; "):rep(111111)
  local _, k = s:gsub("%%", "%%%%")
  return k]])
    assert.are.equal("succeeded", st.status, st.steps[1].error)
    assert.are.equal(111111, st.steps[1].result)
  end)

  it("refuses a replacement too dear at every match for what it is, not for its pattern", function()
    local st = run_step([[
  return (("a"):rep(1 << 20):gsub("", ("%0"):rep(300)))]])
    assert.are.equal("failed", st.status)
    local err = st.steps[1].error or ""
    assert.is_truthy(err:find("string.gsub: a replacement of", 1, true), err)
    assert.is_falsy(err:find("the pattern", 1, true), err)
  end)

  it("gives a function or a table replacement what Lua's gsub gives it", function()
    local st = run_step([[
  local t = { a = "1", b = false }
  local r1 = ("a-b-c"):gsub("(%w)", t)
  local r2, k = ("key=val, x=y"):gsub("(%w+)=(%w+)", function(a, b) return b .. "=" .. a end)
  local r3 = ("abc"):gsub("", function(m) return "[" .. m .. "]" end)
  return { r1, r2, k, r3 }]])
    assert.are.equal("succeeded", st.status, st.steps[1].error)
    assert.are.same({ "1-b-c", "val=key, y=x", 2, "[]a[]b[]c[]" }, st.steps[1].result)
  end)
end)
