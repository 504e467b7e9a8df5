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
    rc, out = mend_cmd(("cancel %s --db %s --memory-limit 50000000"):format(id, H.quote(db)))
    assert.are.equal(2, rc, out)
    assert.matches("--memory-limit needs --sandbox", out, 1, true)
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
