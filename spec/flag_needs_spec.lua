-- A flag that does nothing without another is refused without it (exit 2), never ignored: the
-- user meant it to do something. A token file that is not there is an error naming it (exit 1)
-- whenever it is given.

local H = require "spec.helper"

local function sh(cmd) return H.shell("timeout 10 " .. cmd) end

describe("a flag that does nothing without another", function()
  after_each(H.cleanup)

  it("is refused by mend worker without --listen: --token-file, --max-body, --cors", function()
    local db, dir = H.new_db(), H.tmp_dir()
    local token = H.write_file(dir, "token", "0123456789abcdef0123\n")
    local worker = H.MEND .. " worker --workflows workflows --db " .. H.quote(db)
    for flag, value in pairs { ["token-file"] = token, ["max-body"] = "1000",
                               cors = "http://localhost:3000" } do
      local rc, out = sh(("%s --%s %s"):format(worker, flag, H.quote(value)))
      assert.are.equal(2, rc, out)
      assert.matches("mend: --" .. flag .. " needs --listen", out, 1, true)
    end
  end)

  it("names a token file that is not there, with --listen or without, worker or serve", function()
    local db, missing = H.new_db(), H.tmp_dir() .. "/no-such-token"
    for _, cmd in ipairs { "worker --workflows workflows", "worker --workflows workflows --listen 127.0.0.1:0",
                           "serve --listen 127.0.0.1:0" } do
      local rc, out = sh(("%s %s --token-file %s --db %s"):format(H.MEND, cmd, H.quote(missing), H.quote(db)))
      assert.are.equal(1, rc, cmd .. ": " .. out)
      assert.matches("mend: cannot read --token-file: " .. missing .. ": No such file or directory", out,
                     1, true)
      -- a folder opens but cannot be read: that is said, not that its token is empty
      local folder = H.tmp_dir()
      rc, out = sh(("%s %s --token-file %s --db %s"):format(H.MEND, cmd, H.quote(folder), H.quote(db)))
      assert.are.equal(1, rc, cmd .. ": " .. out)
      assert.matches("mend: cannot read --token-file: " .. folder .. ": Is a directory", out, 1, true)
    end
  end)

  it("is refused by mend breakers: --for but with open, --json but for the list", function()
    local db = H.new_db()
    local rc, out = H.mend_cmd(db, "run workflows/order.lua --clock virtual")
    assert.are.equal(0, rc, out)
    for _, args in ipairs { "breakers --for 60", "breakers reset charge --for 60",
                            "breakers close charge --for 60" } do
      rc, out = H.mend_cmd(db, args)
      assert.are.equal(2, rc, args .. ": " .. out)
      assert.matches("mend: --for is how long open lasts: give it with open", out, 1, true)
    end
    for _, args in ipairs { "breakers reset charge --json", "breakers open charge --json" } do
      rc, out = H.mend_cmd(db, args)
      assert.are.equal(2, rc, args .. ": " .. out)
      assert.matches("mend: --json prints the list: give it without an operation", out, 1, true)
    end
    rc, out = H.mend_cmd(db, "breakers open charge --for 60")
    assert.are.equal(0, rc, out)
  end)
end)
