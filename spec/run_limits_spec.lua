-- What the limits are in `mend run` (and `mend worker`, `mend.engine{}`): engines that run
-- workflow code in the host's own Lua state, with no sandbox. Their --instruction-budget counts
-- Lua instructions, the encoding of a step's result and ctx:log lines; the C work of the
-- standard library and what code allocates are not charged, and there is no memory limit.
-- Those are properties of a sandboxed engine with a state of its own (the C API:
-- tests/test_hostile.c). Each case runs a real `mend run` process.
local H = require "spec.helper"
local mend = require "mend"

local function run(file, budget, db, extra)
  return H.shell(("%s run %s --db %s --clock virtual --json --log-level error%s %s"):format(H.MEND,
    H.quote(file), H.quote(db), budget and (" --instruction-budget " .. budget) or "", extra or ""))
end

local function status_of(out)
  return mend.json.decode(out:match("(%b{})%s*$"))
end

describe("mend run --instruction-budget", function()
  after_each(H.cleanup)

  it("stops a Lua loop, also one that catches the budget's error with pcall: a dead letter naming the budget", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "spin.lua", [[
      return { name = "spin", steps = { { name = "s", execute = function()
        while true do pcall(function() while true do end end) end
      end } } }]])
    local rc, out = run(file, 1000000, db)
    assert.are.equal(4, rc, out)
    local st = status_of(out)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("workflow_error", st.reason)
    assert.matches("step exceeded its instruction budget (1000000 instructions)", st.error, 1, true)
  end)

  it("charges the encoding of a step's result", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "wide.lua", [[
      return { name = "wide", steps = { { name = "s", execute = function()
        local t = {} for i = 1, 5000 do t[i] = i end return t
      end } } }]])
    local rc, out = run(file, 100000, db)
    assert.are.equal(4, rc, out)
    assert.matches("exceeded its instruction budget (100000 instructions) as its result was encoded",
                   status_of(out).error, 1, true)
    rc, out = run(file, 10000000, db)   -- the same step under a budget that pays for it
    assert.are.equal(0, rc, out)
  end)

  it("does not charge what C functions do nor what code allocates", function()
    -- 80 MiB made by string.rep: in a sandboxed engine of the C API this is charged 10M
    -- instructions and fails a budget of 1M; here only the loop's few instructions count.
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "reps.lua", [[
      return { name = "reps", steps = { { name = "s", execute = function()
        local n = 0
        for i = 1, 10 do n = n + #string.rep("x", 8 << 20) end
        return { bytes = n }
      end } } }]])
    local rc, out = run(file, 1000000, db)
    assert.are.equal(0, rc, out)
    assert.are.equal(80 << 20, status_of(out).steps[1].result.bytes)
  end)

  it("offers no memory limit and no sandbox: workflow code there is trusted", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "trusted.lua", ([[
      return { name = "trusted", steps = { { name = "s", execute = function()
        local f = assert(io.open(%q, "w")) f:write("written") f:close()
      end } } }]]):format(dir .. "/outside"))
    for _, flag in ipairs { "--memory-limit 1000000", "--sandbox" } do
      local rc, out = run(file, nil, db, flag)
      assert.are.equal(2, rc, out)
      assert.matches("mend: unknown flag " .. flag:match("^%S+"), out, 1, true)
    end
    local rc, out = run(file, 1000000, db)
    assert.are.equal(0, rc, out)
    assert.are.equal("written", H.slurp(dir .. "/outside"))
    for _, opt in ipairs { "memory_limit", "sandbox" } do
      local ok, err = pcall(mend.engine, { [opt] = 1 })
      assert.is_false(ok)
      assert.matches("mend.engine: unknown option " .. opt, err, 1, true)
    end
  end)
end)
