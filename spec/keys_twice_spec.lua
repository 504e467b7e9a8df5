-- JSON text with a key given twice in one object, refused wherever it is handed to mend from
-- outside (the command line; Lua's decode when asked), with a message naming the key, as the
-- HTTP API refuses such a body (bad_json): which of the two was meant is not known.
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

  it("is refused by mend.json.decode given { duplicates = false }, naming the key and where", function()
    local ok, err = pcall(mend.json.decode, '{"a": {"b": 1,\n "b": 2}}', { duplicates = false })
    assert.is_false(ok)
    assert.matches("line 2 column %d+: duplicate object key near '\"b\"'", err)
    -- the same key in two objects is two keys
    assert.are.same({ { b = 1 }, { b = 2 } },
                    mend.json.decode('[{"b": 1}, {"b": 2}]', { duplicates = false }))
    -- by default the last one wins, as most JSON readers read a service's answer
    assert.are.same({ a = { b = 2 } }, mend.json.decode('{"a": {"b": 1,\n "b": 2}}'))
    assert.has_error(function() mend.json.decode("{}", { duplicates = "no" }) end,
                     "mend.json.decode: duplicates is true or false, got string")
    -- what is not a table after the text is not options (decode(select(2, ...)) passes it on)
    assert.are.same({ a = 2 }, mend.json.decode('{"a": 1, "a": 2}', "stderr text"))
  end)
end)

local legacy = { name = "legacy", steps = {
  { name = "first", execute = function() return { a = 1 } end },
  { name = "gate", wait_for = "go" },
  { name = "use", execute = function(ctx, input)
      return { first = ctx.results.first, input_type = type(input),
               x = type(input) == "table" and input.x or nil }
    end },
} }

-- A row mend stored is read as it was written, whoever wrote it (another tool, a hand, a copy):
-- a key given twice in it is read as the status view reads it, the last winning.
describe("#sqlite a stored row with a key given twice", function()
  after_each(H.cleanup)

  it("still loads after a restart: a step's result and the run's input as the status shows them", function()
    local eng, db = H.new_engine()
    eng:register(legacy)
    local id = eng:start("legacy", { x = 1 })
    eng:run()
    assert.are.equal("waiting", H.step(eng:status(id), "gate").status)
    H.close(eng)
    H.sql(db, ("UPDATE steps SET result = '{\"a\":1,\"a\":2}' WHERE run_id = '%s' AND name = 'first'"):format(id))
    H.sql(db, ("UPDATE runs SET input = '{\"x\":1,\"x\":2}' WHERE id = '%s'"):format(id))
    local eng2 = H.reopen(db)
    eng2:register(legacy)
    eng2:recover()
    assert.are.same({ a = 2 }, H.step(eng2:status(id), "first").result)
    eng2:signal(id, "go", {})
    eng2:run()
    local st = eng2:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ first = { a = 2 }, input_type = "table", x = 2 }, H.step(st, "use").result)
  end)
end)
