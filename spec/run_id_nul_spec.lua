-- A run id, token, workflow name, version or key holding a NUL byte, given to an engine's
-- method: C reads it only up to its NUL, so eng:cancel("abc\0evil") cancelled run "abc" and
-- eng:status of it answered abc's. Every such method refuses it, naming itself and what it was
-- given for, and the run it would have been cut to is left as it was (as eng:start and
-- eng:signal do: spec/key_nul_spec.lua).
local H = require "spec.helper"

local WAITER = [[
return { name = "waiter", steps = { { name = "w", wait_for = "go" },
  { name = "s", execute = function(ctx) return ctx.input end } } }
]]

describe("an engine method given a text holding a NUL byte", function()
  after_each(H.cleanup)

  it("refuses it for every run id, token, name, version and key, leaving the run as it was", function()
    local eng = H.new_engine({ clock = "virtual" })
    local dir = H.tmp_dir()
    local path = H.write_file(dir, "waiter.lua", WAITER)
    eng:load(path)
    local id = eng:start("waiter", {}, { detached = true })
    local cut = id .. "\0evil"
    local cases = {
      { "status", function() return eng:status(cut) end, "the run id" },
      { "history", function() return eng:history(cut) end, "the run id" },
      { "wait", function() return eng:wait(cut, { timeout = 0 }) end, "the run id" },
      { "cancel", function() return eng:cancel(cut) end, "the run id" },
      { "resolve", function() return eng:resolve(cut, { note = "n" }) end, "the run id" },
      { "dlq_retry", function() return eng:dlq_retry(cut) end, "the run id" },
      { "upgrade", function() return eng:upgrade(cut, "v") end, "the run id" },
      { "upgrade's version", function() return eng:upgrade(id, "v\0x") end, "the version" },
      { "resume", function() return eng:resume(cut) end, "the run id" },
      { "complete", function() return eng:complete("tok\0x", {}) end, "the token" },
      { "fail", function() return eng:fail("tok\0x", {}) end, "the token" },
      { "loaded_version", function() return eng:loaded_version("waiter\0x") end, "the workflow's name" },
      { "workflows", function() return eng:workflows("waiter\0x") end, "the workflow's name" },
      { "load_version", function() return eng:load_version("waiter\0x", "v") end, "the workflow's name" },
      { "load_version's version", function() return eng:load_version("waiter", "v\0x") end, "the version" },
      { "load", function() return eng:load(path .. "\0x") end, "the path" },
      { "breaker", function() return eng:breaker("k\0x", "reset") end, "the breaker's key" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(c[2])
      assert.is_false(ok, c[1])
      local method = c[1]:match("^[%w_]+")
      local said = method .. ": " .. c[3] .. " holds a NUL byte: it would be cut short there"
      assert.is_truthy(tostring(err):find(said, 1, true), c[1] .. ": " .. tostring(err))
    end
    assert.are.equal("running", eng:status(id).status)
  end)
end)

describe("mend's own functions given a text holding a NUL byte", function()
  after_each(H.cleanup)

  -- mend.copy("a.db\0x", ...) copied a.db; mend.call("f\0x") called f.
  it("refuse a database path or a host function's name cut short", function()
    local mend = require "mend"
    local dir = H.tmp_dir()
    local db = H.tmp_db()
    H.close(H.reopen(db, {}))
    for _, f in ipairs {
      function() mend.copy(db .. "\0x", "postgres://nowhere.invalid/x") end,
      function() mend.copy(db, "postgres://nowhere.invalid/x\0y") end,
      function() mend.upgrade_db(db .. "\0x") end,
      function() mend.trust_db(db .. "\0x") end,
    } do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("holds a NUL byte", tostring(err), 1, true)
    end
    local eng = H.new_engine({ clock = "virtual" })
    eng:load(H.write_file(dir, "caller.lua", [[
local mend = require "mend"
return { name = "caller", steps = { { name = "s", execute = function()
  local ok, err = pcall(mend.call, "f\0x")
  return { ok = ok, err = tostring(err) }
end } } }
]]))
    local id = eng:start("caller", {})
    eng:run()
    local res = eng:status(id).steps[1].result
    assert.is_false(res.ok)
    assert.matches("holds a NUL byte", res.err, 1, true)
  end)
end)
