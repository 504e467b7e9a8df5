-- A key holding a NUL byte, given through Lua (the one door where a string may hold one: the
-- command line cannot pass it, JSON and the C API's strings end there). C reads a key only up to
-- its NUL, so "order-7\0evil" was the run key "order-7": the start answered another run's id,
-- "existed", and its input was dropped; "kill-1\0x" was a repeat of the event keyed "kill-1".
-- Refused, naming what it was given for, as a step's idempotency_key is (tests/hostile/c33).
local H = require "spec.helper"

local WAITER = [[
return { name = "waiter", steps = { { name = "w", wait_for = "go" },
  { name = "s", execute = function(ctx) return ctx.input end } } }
]]

describe("a key holding a NUL byte", function()
  after_each(H.cleanup)

  it("is refused as a run key, not taken for another run's", function()
    local eng, db = H.new_engine({ clock = "virtual" })
    eng:load(H.write_file(H.tmp_dir(), "waiter.lua", WAITER))
    local id1 = eng:start("waiter", { a = 1 }, { key = "order-7", detached = true })
    local ok, err = pcall(eng.start, eng, "waiter", { a = 2 }, { key = "order-7\0evil", detached = true })
    assert.is_false(ok)
    assert.matches("start: key holds a NUL byte: it would be cut short there", err, 1, true)
    assert.has_error(function() eng:start("waiter\0x", {}) end,
                     "start: the workflow's name holds a NUL byte: it would be cut short there")
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
    assert.are.same({ a = 1 }, eng:status(id1).input)
  end)

  it("is refused as an event's key, its name or its run's, not taken for another's", function()
    local eng = H.new_engine({ clock = "virtual" })
    eng:load(H.write_file(H.tmp_dir(), "waiter.lua", WAITER))
    local id = eng:start("waiter", {}, { detached = true })
    assert.are.equal("sent", (eng:signal(id, "other", { n = 1 }, { key = "kill-1" })))
    for _, call in ipairs {
      { function() return eng:signal(id, "other", { n = 2 }, { key = "kill-1\0x" }) end, "key" },
      { function() return eng:signal(id, "other\0x", { n = 2 }) end, "the event's name" },
      { function() return eng:signal(nil, "other", { n = 2 }, { run_key = "k\0x" }) end, "run_key" },
      { function() return eng:signal(id .. "\0x", "other", { n = 2 }) end, "the run id" },
    } do
      local ok, err = pcall(call[1])
      assert.is_false(ok, call[2])
      assert.matches("signal: " .. call[2] .. " holds a NUL byte: it would be cut short there",
                     err, 1, true)
    end
  end)
end)
