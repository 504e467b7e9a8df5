-- Who did an operation, as the Lua API takes it (eng:start, eng:signal and the repairs' {who=}):
-- unlike --who and X-Mend-Who, any Lua string could be given. What a store keeps must be UTF-8
-- (PostgreSQL refuses a batch holding other bytes, and the engine with it), whole (the history's
-- `by WHO` row) and printable (mend history prints it as it is). Not tagged #sqlite: it runs on
-- PostgreSQL too, where a bad text broke the engine.
local H = require "spec.helper"

local function register(eng)
  eng:register{ name = "waits", steps = { { name = "approve", wait_for = "go", timeout = 60 } } }
end

local function started(eng, id)
  for _, h in ipairs(eng:history(id)) do
    if h.event == "started" then return h.detail end
  end
end

-- The engine still works: a start and an event after the refusal.
local function still_works(eng)
  local id = eng:start("waits", {}, { who = "carol" })
  assert.are.equal("sent", (eng:signal(id, "go", 1, { who = "bob" })))
  assert.are.equal("by carol", started(eng, id))
end

-- f(...) raises, and its error's text holds message.
local function refused(message, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  assert.matches(message, tostring(err), 1, true)
end

describe("who, through the Lua API", function()
  after_each(H.cleanup)

  it("is kept whole up to 256 bytes, a multi-byte character at its end", function()
    local eng = H.new_engine()
    register(eng)
    local who = ("a"):rep(254) .. "é"
    assert.are.equal(256, #who)
    local id = eng:start("waits", {}, { who = who })
    assert.are.equal("by " .. who, started(eng, id))
    still_works(eng)
  end)

  it("is refused, naming the bound and the caller's line, past 256 bytes or empty", function()
    local eng = H.new_engine()
    register(eng)
    local ok, err = pcall(function() eng:start("waits", {}, { who = ("w"):rep(257) }) end)
    assert.is_false(ok)
    assert.matches("who_text_spec%.lua:%d+: start: who must be 1 to 256 bytes, got 257$", err)
    refused("got 0", eng.start, eng, "waits", {}, { who = "" })
    still_works(eng)
  end)

  it("that is not UTF-8 is refused on a signal, and the engine goes on", function()
    local eng = H.new_engine()
    register(eng)
    local id = eng:start("waits", {})
    refused("signal: who is not UTF-8 text", eng.signal, eng, id, "go", 1, { who = "b\255b" })
    assert.are.equal("sent", (eng:signal(id, "go", 1, { who = "bob" })))
    still_works(eng)
  end)

  it("with a control character is refused on a repair", function()
    local eng = H.new_engine()
    register(eng)
    local id = eng:start("waits", {})
    refused("cancel: who holds a control character", eng.cancel, eng, id,
            { who = "eve\n2026-01-01 run done" })
    assert.are.equal("cancelled", (eng:cancel(id, { who = "alice" })))
  end)
end)

describe("who on a repair, read as every option is read", function()
  after_each(H.cleanup)

  -- A who that was not a string was dropped for the user and host of the process: the repair
  -- was recorded as someone else's.
  -- A number was made a string on the stack and freed there while the repair read it: the
  -- note and who recorded were whatever the collector left (valgrind: a read of freed memory).
  it("is refused when it is not a string, or holds a NUL byte", function()
    local eng = H.new_engine()
    register(eng)
    local id = eng:start("waits", {})
    refused("cancel: who must be a string, got table", eng.cancel, eng, id, { who = { "alice" } })
    refused("cancel: who must be a string, got number", eng.cancel, eng, id, { who = 4000011 })
    refused("cancel: who holds a NUL byte: it would be cut short there", eng.cancel, eng, id,
            { who = "ali\0ce" })
    assert.are.equal("cancelled", (eng:cancel(id, { who = "alice" })))
  end)
end)

describe("an event's key and name, through the Lua API", function()
  after_each(H.cleanup)

  it("that are not UTF-8 are refused, and the engine goes on", function()
    local eng = H.new_engine()
    register(eng)
    local id = eng:start("waits", {})
    refused("signal: the event's key is not UTF-8 text", eng.signal, eng, id, "go", 1,
            { key = "k\255" })
    refused("signal: the event's name is not UTF-8 text", eng.signal, eng, id, "g\192o", 1)
    refused("start: the run key is not UTF-8 text", eng.start, eng, "waits", {}, { key = "\255" })
    still_works(eng)
  end)
end)
