-- JSON text with a key given twice in one object, refused wherever it comes in from the command
-- line or from Lua, with a message naming the key, as the HTTP API refuses such a body
-- (bad_json): the last of the two was taken silently, and which one was meant is not known.
-- The C API's entries are test_keys_twice's.

local mend = require "mend"
local H = require "spec.helper"

local TWICE = '{"order": {"sku": 1, "qty": 2, "sku": 3}}'

describe("JSON text with a key given twice", function()
  after_each(H.cleanup)

  it("is refused by mend start, mend run, mend signal and mend complete, exit 1", function()
    local db = H.new_db()
    local rc, id = H.mend_cmd(db, "start order")
    assert.are.equal(0, rc, id)
    id = id:match("%S+")
    local out
    for _, cmd in ipairs { "start order", "run workflows/order.lua --clock virtual" } do
      rc, out = H.mend_cmd(db, cmd .. " --input " .. H.quote(TWICE))
      assert.are.equal(1, rc, out)
      assert.matches("invalid %-%-input JSON: .*duplicate object key near '\"sku\"'", out)
    end
    rc, out = H.shell(("printf '%%s' %s | %s start order --input @- --db %s")
                        :format(H.quote(TWICE), H.MEND, H.quote(db)))
    assert.are.equal(1, rc, out)
    assert.matches("duplicate object key near '\"sku\"'", out)
    rc, out = H.mend_cmd(db, "signal " .. id .. " paid --data " .. H.quote('[{"by": "ann", "by": "bob"}]'))
    assert.are.equal(1, rc, out)
    assert.matches("%-%-data is not JSON: .*duplicate object key near '\"by\"'", out)
    rc, out = H.mend_cmd(db, "complete mtk_0 --result " .. H.quote('{"ok": true, "ok": false}'))
    assert.are.equal(1, rc, out)
    assert.matches("%-%-result is not JSON: .*duplicate object key near '\"ok\"'", out)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox"))
  end)

  it("is refused by mend.json.decode, the REPL's json.decode, naming the key and where", function()
    local ok, err = pcall(mend.json.decode, '{"a": {"b": 1,\n "b": 2}}')
    assert.is_false(ok)
    assert.matches("line 2 column %d+: duplicate object key near '\"b\"'", err)
    -- the same key in two objects is two keys
    assert.are.same({ { b = 1 }, { b = 2 } }, mend.json.decode('[{"b": 1}, {"b": 2}]'))
  end)
end)
