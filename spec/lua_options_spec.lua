-- The option tables of an engine's methods are read as mend.engine{} and workflow definitions
-- are: a field a method does not take raises, naming it and what the method takes. A
-- misspelt `key` was dropped: eng:start started a second run where the key promised the
-- first, eng:signal sent an event twice where the key promised once.
local H = require "spec.helper"

local WF = [[
return { name = "w", steps = { { name = "hear", wait_for = "go" } } }
]]

local function refuses(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "accepted: " .. pattern)
  assert.matches(pattern, tostring(err), 1, true)
end

describe("an engine method's options", function()
  after_each(H.cleanup)

  it("are refused when the method does not take them, naming the field", function()
    local eng = H.new_engine()
    eng:load(H.write_file(H.tmp_dir(), "w.lua", WF))
    refuses("start: unknown option kye (it takes key, detached, who)", eng.start, eng, "w", nil,
            { kye = "k-1" })
    assert.are.same({}, eng:runs())
    local id = eng:start("w", nil, { key = "k-1" })
    refuses("signal: unknown option kye (it takes key, run_key, who)", eng.signal, eng, id, "go", 1,
            { kye = "e-1" })
    refuses("history: unknown option tial", eng.history, eng, id, { tial = 5 })
    refuses("runs: unknown option stauts", eng.runs, eng, { stauts = "running" })
    refuses("wait: unknown option timout", eng.wait, eng, id, { timout = 0.1 })
    refuses("prune: unknown option olderthan", eng.prune, eng, { older_than = 1, olderthan = 1 })
    refuses("cancel: unknown option whoo (it takes who)", eng.cancel, eng, id, { whoo = "x" })
    refuses("dlq_retry: unknown option whoo", eng.dlq_retry, eng, id, { whoo = "x" })
    refuses("resolve: unknown option notes (it takes note, who)", eng.resolve, eng, id,
            { notes = "x" })
    refuses("upgrade: unknown option whoo", eng.upgrade, eng, id, "v", { whoo = "x" })
    refuses("breaker: unknown option secs (it takes seconds, who)", eng.breaker, eng, "hear",
            "open", { secs = 5 })
    refuses("start: unknown option 1", eng.start, eng, "w", nil, { "k-2" })
    refuses("fail: unknown option mesage (it takes kind, message)", eng.fail, eng, "mtk_x",
            { kind = "fatal", mesage = "typo" })
    refuses("serve: unknown option pol (it takes poll, max_in_flight, every, tick)", eng.serve,
            eng, { pol = 0.1 })
    local mend = require "mend"
    refuses("upgrade_db: unknown option despite (it takes despite_leases)", mend.upgrade_db,
            H.tmp_dir() .. "/none.db", { despite = true })
    -- nothing of them was done: one run, no event in its inbox, still running
    assert.are.equal(1, #eng:runs())
    assert.are.equal("running", eng:status(id).status)
    assert.are.equal("sent", (eng:signal(id, "go", 1, { key = "e-1" })))
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  -- A limit of 0 or -5 had given every run, unsaid (mend runs --limit refuses them).
  it("refuses a runs limit that is no count of runs", function()
    local eng = H.new_engine()
    eng:load(H.write_file(H.tmp_dir(), "w.lua", WF))
    eng:start("w")
    eng:start("w")
    -- (1.5 and a word had raised "bad argument #-1 to '?'", naming neither)
    for _, n in ipairs { 0, -5, (1 << 31) + 1, 1.5, "some" } do
      refuses("runs: limit must be a whole number from 1 to 2147483647, got " .. n, eng.runs,
              eng, { limit = n })
    end
    -- a since of NaN had been no filter, unsaid
    for _, t in ipairs { 0 / 0, "today" } do
      refuses("runs: since must be a time, seconds since the epoch, got " .. tostring(t), eng.runs,
              eng, { since = t })
    end
    refuses("breaker: seconds must be a number, got soon", eng.breaker, eng, "hear", "open",
            { seconds = "soon" })
    assert.are.equal(1, #eng:runs { limit = 1 })
    assert.are.equal(2, #eng:runs())
  end)

  -- A fraction, NaN or a word where mend.engine{} takes a count or seconds had raised "bad
  -- argument #-1 to 'mend.core.engine' (number has no integer representation)", naming neither.
  it("refuses an engine's count or seconds that is no number, naming the option", function()
    local mend = require "mend"
    for _, case in ipairs {
      { "instruction_budget", 1.5, "a whole number >= 0 (0: no budget), got 1.5" },
      { "max_concurrency", 0 / 0, "a whole number >= 0 (0: no cap), got " .. tostring(0 / 0) },
      { "max_concurrency", math.huge, "a whole number >= 0 (0: no cap), got inf" },
      { "memory_limit", "lots", ">= 0 bytes, a whole number (0: no limit), got lots" },
      { "memory_limit", 2 ^ 64,
        ">= 0 bytes, a whole number (0: no limit), got 1.844674407371e+19" },
      { "lease", "abc", "a finite number > 0 of seconds, got abc" },
      { "grace", true, "a finite number > 0 of seconds, got true" },
      { "park_after", {}, "a number of seconds, got table: " },
    } do
      refuses("mend.engine: " .. case[1] .. " must be " .. case[3], mend.engine,
              { [case[1]] = case[2] })
    end
    H.close(mend.engine { instruction_budget = 2.0, max_concurrency = "3", lease = "5" })
  end)

  -- Counts an engine keeps in a C int: 2^32 + 1 had been a cap of 1 (a worker serving one run at
  -- a time, unsaid) and a recover of one run; 2^32 none.
  it("refuses a serve's cap and a recover's limit past an int's range", function()
    local eng = H.new_engine()
    for _, n in ipairs { -1, (1 << 32) + 1 } do
      -- (the tick stops a serve that took it, so that the test fails rather than hangs)
      refuses("serve: max_in_flight must be a whole number from 0 (no cap) to 2147483647, got "
              .. n, eng.serve, eng,
              { max_in_flight = n, every = 0.01, tick = function() eng:stop() end })
      refuses("recover: limit must be a whole number from 0 (every run) to 2147483647, got " .. n,
              eng.recover, eng, n)
    end
    assert.are.equal(0, eng:recover(0))
  end)
end)

describe("mend.engine{existing = true}", function()
  after_each(H.cleanup)

  it("opens only a mend database, and makes none where there is none #sqlite", function()
    local mend = require "mend"
    local dir = H.tmp_dir()
    local missing, empty = dir .. "/none.db", H.write_file(dir, "empty.db", "")
    refuses("no database at " .. missing, mend.engine, { db = missing, existing = true })
    assert.is_nil(io.open(missing))
    refuses(empty .. ": no mend database there (no mend schema)", mend.engine,
            { db = empty, existing = true })
    assert.are.equal("", H.read(empty))
    refuses("no database at :memory:", mend.engine, { existing = true })
    local db = dir .. "/mend.db"
    mend.engine{ db = db }:close()
    local eng = mend.engine{ db = db, existing = true }
    assert.are.same({}, eng:runs())
    eng:close()
  end)
end)
