-- The commands that load a workflow's code in an engine of their own (`mend dlq retry`,
-- `mend cancel`, `mend upgrade`, `mend start`): the store keeps each version's script, and a run
-- that a sandboxed worker served is carried on by them from that script, sandboxed as `mend
-- worker --sandbox` does: with --sandbox, or on a database a sandboxed engine marked; only
-- --no-sandbox runs its top level and steps with io and os (README: Limits and sandbox). Real
-- `mend` processes.
local H = require "spec.helper"
local mend = require "mend"

-- A workflow that writes `outside` from its top level and its step when io is there, and in a
-- sandbox loops until its budget makes the run a dead letter.
local function evil(dir, outside)
  return H.write_file(dir, "evil.lua", ([[
if io then local f = io.open(%q, "a") f:write("top level\n") f:close() end
return { name = "evil", steps = { { name = "s", execute = function()
  if io then local f = io.open(%q, "a") f:write("step\n") f:close() return "escaped" end
  while true do end
end } } }]]):format(outside, outside))
end

local function mend_cmd(args)
  return H.shell(H.MEND .. " " .. args .. " 2>&1")
end

local function status(db, id)
  return mend.json.decode(select(2, mend_cmd(("status %s --db %s --json"):format(id, H.quote(db))))
                            :match("(%b{})%s*$"))
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

describe("commands that load a stored workflow", function()
  after_each(H.cleanup)

  -- A dead letter of a sandboxed run: its id.
  local function dead_letter(dir, db, outside)
    local file = evil(dir, outside)
    local rc, out = mend_cmd(("run %s --db %s --clock virtual --json --log-level error --sandbox "
                              .. "--instruction-budget 100000"):format(H.quote(file), H.quote(db)))
    assert.are.equal(4, rc, out)
    assert.is_false(exists(outside))
    return out:match('"id":"([^"]+)"')
  end

  it("dlq retry --sandbox carries a sandboxed run on sandboxed: its code never reaches io", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local outside = dir .. "/outside"
    local id = dead_letter(dir, db, outside)
    local rc, out = mend_cmd(("dlq retry %s --db %s --sandbox --instruction-budget 100000")
                               :format(id, H.quote(db)))
    assert.are.equal(4, rc, out)   -- over its budget again: back in the queue
    assert.is_false(exists(outside), out)
    assert.are.equal("needs_attention", status(db, id).status)
    -- without --sandbox too: a sandboxed engine marked the database (spec/sandbox_mark_spec.lua)
    rc, out = mend_cmd(("dlq retry %s --db %s --instruction-budget 100000"):format(id, H.quote(db)))
    assert.are.equal(4, rc, out)
    assert.is_false(exists(outside), out)
    -- only --no-sandbox trusts the stored script: its top level and its step reach io
    rc, out = mend_cmd(("dlq retry %s --db %s --no-sandbox"):format(id, H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.matches("--no-sandbox: the workflows' code runs unsandboxed", out, 1, true)
    assert.are.equal("top level\nstep\n", H.slurp(outside))
    assert.are.equal("escaped", status(db, id).steps[1].result)
  end)

  it("cancel, upgrade and start take --sandbox: the top level they load reaches no io", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local outside = dir .. "/outside"
    evil(dir, outside)
    local rc, out = mend_cmd(("start evil --workflows %s --db %s --sandbox"):format(H.quote(dir), H.quote(db)))
    assert.are.equal(0, rc, out)
    local id = out:match("(%w+)%s*$")
    rc, out = mend_cmd(("upgrade %s --db %s --sandbox"):format(id, H.quote(db)))
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(("cancel %s --db %s --sandbox --memory-limit 50000000"):format(id, H.quote(db)))
    assert.are.equal(0, rc, out)
    local st = status(db, id)   -- nothing done to undo: failed, saying why
    assert.are.equal("failed", st.status)
    assert.matches("cancelled by", st.error, 1, true)
    assert.is_false(exists(outside), out)
    -- the database is marked: sandboxed without --sandbox, and held to --memory-limit
    rc, out = mend_cmd(("cancel %s --db %s --memory-limit 50000000"):format(id, H.quote(db)))
    assert.are_not.equal(2, rc, out)
    assert.is_falsy(out:find("needs --sandbox", 1, true), out)
  end)

  it("serve --sandbox loads its workflow files sandboxed", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local outside, log = dir .. "/outside", dir .. "/serve.log"
    evil(dir, outside)
    local p = io.popen(("sh -c 'exec %s serve --db %s --workflows %s --listen 127.0.0.1:0 --sandbox"
                        .. " >>%s 2>&1' >/dev/null & echo $!"):format(H.MEND, H.quote(db), H.quote(dir), H.quote(log)))
    local pid = p:read("l")
    p:close()
    H.wait_for("mend serve to listen", function() return H.read(log):find("serving", 1, true) end, 10)
    H.stop_worker(pid)
    assert.is_false(exists(outside), H.read(log))
  end)
end)

-- A fleet run trusted, on a database a sandboxed command once marked: each command says the
-- mark sandboxed it, takes --http-allow and --memory-limit without --sandbox, and `mend db
-- trust` is the host's way back.
describe("commands on a database the sandbox mark sandboxes", function()
  after_each(H.cleanup)

  local function marked()
    local db = H.tmp_db()
    H.close(H.reopen(db, { sandbox = true }))
    return db
  end

  it("say on stderr that the mark sandboxed them, where the code meets the sandbox", function()
    local db = marked()
    local file = H.write_file(H.tmp_dir(), "cfg.lua", [[
local f = io.open("/etc/hostname")
return { name = "cfgwf", steps = { { name = "s", execute = function() return {} end } } }
]])
    local rc, out = mend_cmd(("run %s --db %s --clock virtual"):format(H.quote(file), H.quote(db)))
    assert.are_not.equal(0, rc)
    assert.matches("is marked sandboxed (a sandboxed engine opened it)", out, 1, true)
    assert.matches("mend db trust", out, 1, true)
  end)

  it("take --http-allow, and --memory-limit without --sandbox", function()
    local db = marked()
    local file = H.write_file(H.tmp_dir(), "h.lua", [[
local mend = require "mend"
return { name = "h", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return { st = mend.http{ url = "http://payments.internal:9/x", timeout = 1 }.status } end } } }
]])
    local run = ("run %s --db %s --clock virtual --json"):format(H.quote(file), H.quote(db))
    local _, out = mend_cmd(run)
    local e = mend.json.decode(out:match("(%b{})%s*$")).steps[1].error
    assert.matches("not allowed (http_allow: none); this engine is sandboxed because", e, 1, true)
    _, out = mend_cmd(run .. " --http-allow 'other.test, payments.internal'"
                      .. " --memory-limit 33554432")
    e = mend.json.decode(out:match("(%b{})%s*$")).steps[1].error
    assert.is_falsy(e:find("not allowed", 1, true), e)   -- sent (no such host here)
    local rc
    rc, out = mend_cmd(run .. " --http-allow 'a,,b'")
    assert.are.equal(2, rc, out)
  end)

  it("are trusted again after mend db trust, which says what it did", function()
    local db = marked()
    local dir = H.tmp_dir()
    local outside = dir .. "/outside"
    local file = H.write_file(dir, "w.lua", ([[
if io then local f = io.open(%q, "a") f:write("top level\n") f:close() end
return { name = "w", steps = { { name = "s", execute = function() return {} end } } }
]]):format(outside))
    local rc, out = mend_cmd(("db trust --db %s"):format(H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.matches("the sandbox mark is cleared", out, 1, true)
    assert.matches("unsandboxed", out, 1, true)
    rc, out = mend_cmd(("run %s --db %s --clock virtual"):format(H.quote(file), H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.is_true(exists(outside), out)
    rc, out = mend_cmd(("db trust --db %s"):format(H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.matches("not marked sandboxed: nothing to do", out, 1, true)
    rc, out = mend_cmd(("db trust --db %s"):format(H.quote(H.tmp_dir() .. "/none.db")))
    assert.are.equal(1, rc, out)
  end)
end)
