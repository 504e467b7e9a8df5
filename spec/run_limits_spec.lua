-- What the limits are in `mend run` (and `mend worker`, `mend.engine{}`): by default engines that
-- run workflow code in the host's own Lua state, with no sandbox. Their --instruction-budget
-- counts Lua instructions, the encoding of a step's result and ctx:log lines; the C work of the
-- standard library and what code allocates are not charged, and there is no memory limit.
-- `mend run --sandbox [--memory-limit N]` (and `mend.engine{sandbox = true, memory_limit = N}`)
-- runs it instead in an engine with a state of its own, as the C API makes
-- (tests/test_hostile.c), where all three hold; so does `mend worker --sandbox`
-- (spec/worker_sandbox_spec.lua). Each case runs a real `mend run` process.
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

  it("offers no memory limit and no sandbox unless asked: workflow code there is trusted", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "trusted.lua", ([[
      return { name = "trusted", steps = { { name = "s", execute = function()
        local f = assert(io.open(%q, "w")) f:write("written") f:close()
      end } } }]]):format(dir .. "/outside"))
    local rc, out = run(file, nil, db, "--memory-limit 1000000")
    assert.are.equal(2, rc, out)
    assert.matches("mend: --memory-limit needs --sandbox", out, 1, true)
    rc, out = run(file, 1000000, db)
    assert.are.equal(0, rc, out)
    assert.are.equal("written", H.slurp(dir .. "/outside"))
  end)
end)

describe("mend run --sandbox", function()
  after_each(H.cleanup)

  it("runs workflow code in a sandbox: no io, os.execute nor mend.engine, nothing written", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "escape.lua", ([[
      local mend = require "mend"
      return { name = "escape", steps = {
        { name = "look", execute = function()
            return { io = type(io), execute = type(os.execute), engine = type(mend.engine) }
          end },
        { name = "write", retry = { max_attempts = 1 }, execute = function()
            local f = assert(io.open(%q, "w")) f:write("written") f:close()
          end } } }]]):format(dir .. "/outside"))
    local rc, out = run(file, nil, db, "--sandbox")
    assert.are.equal(3, rc, out)
    local st = status_of(out)
    assert.are.equal("compensated", st.status)   -- the second step failed for good
    assert.are.same({ io = "nil", execute = "nil", engine = "nil" }, st.steps[1].result)
    assert.matches("global 'io'", st.steps[2].error, 1, true)
    assert.is_nil(io.open(dir .. "/outside"))
  end)

  it("holds code to --memory-limit, and charges what C functions allocate to the budget", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local hog = H.write_file(dir, "hog.lua", [[
      return { name = "hog", steps = { { name = "s", execute = function()
        local t = {} for i = 1, 100 do t[i] = string.rep("x", 1 << 20) .. i end
      end } } }]])
    local rc, out = run(hog, nil, db, "--sandbox --memory-limit 67108864")
    assert.are.equal(4, rc, out)
    assert.matches("step exceeded the memory limit (67108864 bytes)", status_of(out).error, 1, true)
    -- The loop that the engine of the host's state lets through a budget of 1M (above).
    local reps = H.write_file(dir, "reps.lua", [[
      return { name = "reps", steps = { { name = "s", execute = function()
        local n = 0
        for i = 1, 10 do n = n + #string.rep("x", 8 << 20) end
        return { bytes = n }
      end } } }]])
    rc, out = run(reps, 1000000, db, "--sandbox")
    assert.are.equal(4, rc, out)
    assert.matches("step exceeded its instruction budget (1000000 instructions)",
                   status_of(out).error, 1, true)
  end)

  it("refuses under a timeout a fresh block that cannot be faulted in before it", function()
    local dir, db = H.tmp_dir(), H.new_db()
    -- 8 MiB in one string.rep, 2048 pages, with 5 s to go
    local big = H.write_file(dir, "big.lua", [[
      return { name = "big", steps = { { name = "s", timeout = 5, retry = { max_attempts = 1 },
        execute = function() return #string.rep("x", 8 << 20) end } } }]])
    -- as this machine's faults were measured (some 10 us a page on a virtual machine, under
    -- 1 us on bare metal): 20 ms at most, let through
    local rc, out = run(big, nil, db, "--sandbox")
    assert.are.equal(0, rc, out)
    assert.are.equal(8 << 20, status_of(out).steps[1].result)
    -- at 10 ms a page (the environment's override): 20 s, refused there
    rc, out = H.shell(("MEND_FAULT_SECONDS=0.01 %s run %s --db %s --clock virtual --json "
      .. "--log-level error --sandbox"):format(H.MEND, H.quote(big), H.quote(db)))
    assert.are.equal(4, rc, out)
    assert.matches("step exceeded its timeout", status_of(out).error, 1, true)
  end)

  it("is an engine of the Lua binding too: mend.engine{sandbox = true} loads files, not tables", function()
    local eng = mend.engine { sandbox = true, memory_limit = 1 << 26 }
    local ok, err = pcall(eng.register, eng, { name = "t", steps = {} })
    assert.is_false(ok)
    assert.matches("loads workflows from files only", err, 1, true)
    eng:close()
    ok, err = pcall(mend.engine, { memory_limit = -1 })
    assert.is_false(ok)
    assert.matches("memory_limit must be >= 0", err, 1, true)
    -- an infinite lease renews nothing (PostgreSQL refuses the interval at the first renewal)
    ok, err = pcall(mend.engine, { lease = math.huge })
    assert.is_false(ok)
    assert.matches("lease must be a finite number > 0 of seconds", err, 1, true)
    -- a grace of NaN or infinity: a stopping worker waited for ever for its attempts
    for _, g in ipairs { 0 / 0, math.huge, -1, 0 } do
      ok, err = pcall(mend.engine, { grace = g })
      assert.is_false(ok, tostring(g))
      assert.matches("grace must be a finite number > 0 of seconds", err, 1, true)
    end
    -- park_after NaN had been read as never, unsaid (< 0 is never, as documented)
    ok, err = pcall(mend.engine, { park_after = 0 / 0 })
    assert.is_false(ok)
    assert.matches("park_after must be a number of seconds, got nan", err, 1, true)
    H.close(mend.engine { park_after = -1 })
    -- a negative budget or cap had been read as none (mend_engine_new refuses them), and a cap
    -- past an int's range as what was left of it (2^32 + 1: 1)
    for opt, v in pairs { instruction_budget = -1, max_concurrency = -1 } do
      ok, err = pcall(mend.engine, { [opt] = v })
      assert.is_false(ok, opt)
      assert.matches("mend.engine: " .. opt .. " must be a whole number >= 0", err, 1, true)
    end
    ok, err = pcall(mend.engine, { max_concurrency = (1 << 32) + 1 })
    assert.is_false(ok)
    assert.matches("max_concurrency must be a whole number >= 0 (0: no cap), got 4294967297",
                   err, 1, true)
  end)
end)
