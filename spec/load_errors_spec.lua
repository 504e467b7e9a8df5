-- Loading workflow files: a good file loads and runs; a broken one is refused with a message
-- that names the file, the step and the field, so that the author can fix it at once.
local H = require "spec.helper"

-- A step table in Lua source, with `fields` (source text) added to a valid step.
local function wf_source(opts)
  local steps = opts.steps or {
    string.format('{ name = %q, execute = function() return 1 end%s }', "charge",
      opts.step_fields and (", " .. opts.step_fields) or ""),
  }
  return string.format([[
local mend = require "mend"
return {
  %s
  %s
  steps = { %s },
}
]], opts.no_name and "" or 'name = "order",', opts.wf_fields or "", table.concat(steps, ",\n"))
end

-- Writes `text` to a new file named `fname` and returns the path and the error of eng:load.
local function load_broken(fname, text)
  local eng = H.new_engine()
  local path = H.write_file(H.tmp_dir(), fname, text)
  local ok, err = pcall(eng.load, eng, path)
  assert.is_false(ok, fname .. " loaded but should not have")
  return path, tostring(err), eng
end

local function has(msg, s)
  assert.is_truthy(msg:find(s, 1, true), "expected «" .. s .. "» in: " .. msg)
end

describe("a workflow file", function()
  after_each(H.cleanup)

  it("loads, returns its name and runs", function()
    local eng = H.new_engine()
    local path = H.write_file(H.tmp_dir(), "order.lua", wf_source {})
    assert.are.equal("order", eng:load(path))
    local id = eng:start("order", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  it("with a syntax error is refused with a message naming the file", function()
    local path, err = load_broken("syntax.lua", "return { name = \"x\", steps = { { name = } }\n")
    has(err, "syntax.lua")
    has(err, path)
  end)

  it("that raises while loading is refused with a message naming the file", function()
    local _, err = load_broken("raises.lua", "error('cannot configure')\n")
    has(err, "raises.lua")
    has(err, "cannot configure")
  end)

  it("that raises an error object while loading is refused with a message naming the file",
     function()
    -- Lua puts the file and line only in front of a string; these said "(error object is a
    -- table value)", "custom msg" or "fatal: bad config", with nothing to say which file.
    local raises = {
      ["table.lua"] = "error({ code = 1 })\n",
      ["tostring.lua"] = "error(setmetatable({}, { __tostring = function() return 'custom msg' end }))\n",
      ["typed.lua"] = "error(require('mend').fatal('bad config'))\n",
    }
    for _, sandbox in ipairs { false, true } do
      for fname, text in pairs(raises) do
        local eng = H.new_engine { sandbox = sandbox }
        local path = H.write_file(H.tmp_dir(), fname, text)
        local ok, err = pcall(eng.load, eng, path)
        assert.is_false(ok)
        has(tostring(err), path .. ": ")
      end
    end
    local _, err = load_broken("typed2.lua", "error(require('mend').fatal('bad config'))\n")
    has(err, "typed2.lua: fatal: bad config")
  end)

  it("that is a binary chunk is refused with a message naming the file", function()
    -- said only "attempt to load a binary chunk (mode is 't')"
    local path, err = load_broken("compiled.lua", string.dump(function() return {} end))
    has(err, path .. ": attempt to load a binary chunk")
  end)

  it("that does not return a table is refused with a message naming the file", function()
    local _, err = load_broken("notable.lua", "return 42\n")
    has(err, "notable.lua")
  end)

  it("that does not exist is refused with a message naming the file", function()
    local eng = H.new_engine()
    local path = H.tmp_dir() .. "/missing.lua"
    local ok, err = pcall(eng.load, eng, path)
    assert.is_false(ok)
    has(tostring(err), "missing.lua")
    has(tostring(err), "No such file or directory")
  end)

  -- eng:load, mend_engine_load, the REPL's use and mend run read the file alike: a folder
  -- opens as a file would, and only its read fails; the message says which it is.
  it("that is a folder is refused, saying it is a folder", function()
    local eng = H.new_engine()
    local path = H.tmp_dir() .. "/order.lua"
    assert(os.execute("mkdir " .. H.quote(path)))
    local ok, err = pcall(eng.load, eng, path)
    assert.is_false(ok)
    has(tostring(err), path .. ": cannot read workflow file: Is a directory")
    local code, out = H.mend_cmd(H.new_db(), "run " .. H.quote(path))
    assert.are.equal(1, code, out)
    has(out, path .. ": cannot read workflow file: Is a directory")
  end)

  it("without a name is refused, naming the file and the field", function()
    local _, err = load_broken("noname.lua", wf_source { no_name = true })
    has(err, "noname.lua")
    has(err, "name")
  end)

  it("with an empty name is refused, naming the file and the field", function()
    local text = wf_source {}:gsub('name = "order"', 'name = ""')
    local _, err = load_broken("emptyname.lua", text)
    has(err, "emptyname.lua")
    has(err, "name")
  end)

  -- A hole in the list (or a step under a key) had the steps past it silently left out: the
  -- run succeeded without ever running them.
  it("whose steps are not a list is refused, naming the file and the field", function()
    for i, steps in ipairs {
      '[1] = { name = "a", execute = function() end }, [3] = { name = "c", execute = function() end }',
      '{ name = "a", execute = function() end }, later = { name = "b", execute = function() end }',
    } do
      local text = ('return { name = "order", steps = { %s } }'):format(steps)
      local path, err = load_broken("holes" .. i .. ".lua", text)
      assert.are.equal(path .. ': workflow "order": steps must be a non-empty list of steps', err)
    end
  end)

  it("with two steps of the same name is refused, naming the file and the step", function()
    local _, err = load_broken("dup.lua", wf_source { steps = {
      '{ name = "charge", execute = function() end }',
      '{ name = "ship", execute = function() end }',
      '{ name = "charge", execute = function() end }',
    } })
    has(err, "dup.lua")
    has(err, "charge")
    local lower = err:lower()
    assert.is_truthy(lower:find("duplicate") or lower:find("twice") or lower:find("unique")
      or lower:find("already"), "does not say the name is repeated: " .. err)
  end)

  it("with a step whose execute is not a function is refused, naming file, step and field",
    function()
      local _, err = load_broken("noexec.lua", wf_source { steps = {
        '{ name = "charge", execute = "charge the card" }',
      } })
      has(err, "noexec.lua")
      has(err, "charge")
      has(err, "execute")
    end)

  it("with a step without execute is refused, naming file, step and field", function()
    local _, err = load_broken("missingexec.lua", wf_source { steps = {
      '{ name = "charge" }',
    } })
    has(err, "missingexec.lua")
    has(err, "charge")
    has(err, "execute")
  end)

  it("with a negative retry delay is refused with the documented message", function()
    local path, err = load_broken("negative.lua",
      wf_source { step_fields = "retry = { initial = -1 }" })
    has(err, path .. ': step "charge": retry.initial must be >= 0, got -1')
  end)

  it("with an unknown strategy is refused, naming file, step and the strategy field",
    function()
      local _, err = load_broken("strategy.lua",
        wf_source { step_fields = 'retry = { strategy = "random" }' })
      has(err, "strategy.lua")
      has(err, "charge")
      has(err, "retry.strategy")
    end)

  it("with an unknown field in a retry table is refused, naming file, step and field",
    function()
      local _, err = load_broken("typo.lua",
        wf_source { step_fields = "retry = { max_atempts = 3 }" })
      has(err, "typo.lua")
      has(err, "charge")
      has(err, "max_atempts")
    end)

  it("with a bad workflow-level policy is refused, naming file and field", function()
    local _, err = load_broken("wfretry.lua",
      wf_source { wf_fields = "retry = { max_attempts = 0 }," })
    has(err, "wfretry.lua")
    has(err, "retry.max_attempts")
  end)

  it("with a bad compensate_retry is refused, naming file, step and field", function()
    local _, err = load_broken("comp.lua",
      wf_source { step_fields = "compensate_retry = { multiplier = 0.5 }" })
    has(err, "comp.lua")
    has(err, "charge")
    has(err, "compensate_retry.multiplier")
  end)

  it("with a non-function compensate is refused, naming file, step and field", function()
    local _, err = load_broken("comp2.lua",
      wf_source { step_fields = "compensate = 3" })
    has(err, "comp2.lua")
    has(err, "charge")
    has(err, "compensate")
  end)

  it("with a negative timeout is refused, naming file, step and field", function()
    local _, err = load_broken("timeout.lua", wf_source { step_fields = "timeout = -2" })
    has(err, "timeout.lua")
    has(err, "charge")
    has(err, "timeout")
  end)

  it("with an integer field beyond int's range is refused, naming file and field", function()
    local _, err = load_broken("huge.lua",
      wf_source { step_fields = "retry = { max_attempts = 1e300 }" })
    has(err, "huge.lua")
    has(err, "retry.max_attempts must be an integer of at most 2147483647, got 1e+300")
  end)

  it("whose steps claim a billion entries (a __len) is refused, naming file and field", function()
    local _, err = load_broken("len.lua", [[
return { name = "len", steps = setmetatable({}, { __len = function() return 1e9 end }) }
]])
    has(err, "len.lua")
    has(err, "steps")
  end)
end)

describe("a registered definition", function()
  after_each(H.cleanup)

  it("goes through the same checks, named as register", function()
    local eng = H.new_engine()
    local ok, err = pcall(eng.register, eng, {
      name = "inline",
      steps = { { name = "charge", execute = function() end, retry = { initial = -1 } } },
    })
    assert.is_false(ok)
    err = tostring(err)
    has(err, "register")
    has(err, 'step "charge": retry.initial must be >= 0, got -1')
  end)

  it("refuses a number field that is NaN, saying so (it printed \"-nan\")", function()
    local eng = H.new_engine()
    for _, field in ipairs { "timeout", "sleep" } do
      local step = { name = "charge", execute = function() end }
      step[field] = 0 / 0
      local ok, err = pcall(eng.register, eng, { name = "nan_" .. field, steps = { step } })
      assert.is_false(ok)
      has(tostring(err), 'step "charge": step.' .. field .. ' must be a number, got NaN')
    end
    local ok, err = pcall(eng.register, eng, { name = "nan_retry", steps = {
      { name = "charge", execute = function() end, retry = { initial = 0 / 0 } } } })
    assert.is_false(ok)
    assert.is_nil(tostring(err):find("nan", 1, true), tostring(err))
  end)
end)

-- Names had no maximum: a workflow with a 4 MiB name loaded, then a host's buffer for its name
-- cut it short and no run of it could be started. MEND_NAME_MAX (512 bytes) is the longest.
describe("a name over 512 bytes", function()
  after_each(H.cleanup)

  it("of a workflow, a step or an awaited event is refused at load, naming the field", function()
    local long = string.rep("n", 4 << 20)
    local _, err = load_broken("wf.lua", ("return { name = %q, steps = { { name = 's', execute = function() end } } }"):format(long))
    has(err, "workflow.name is 4194304 bytes long, over the longest name of 512 bytes")
    _, err = load_broken("step.lua", wf_source { steps = { ("{ name = %q, execute = function() end }"):format(string.rep("s", 513)) } })
    has(err, ".name is 513 bytes long, over the longest name of 512 bytes")
    _, err = load_broken("event.lua", wf_source { step_fields = ("wait_for = %q"):format(string.rep("e", 600)) })
    has(err, "wait_for is 600 bytes long")
    -- 512 bytes is a name
    local eng = H.new_engine()
    local name = string.rep("w", 512)
    local path = H.write_file(H.tmp_dir(), "ok.lua", ("return { name = %q, steps = { { name = 's', execute = function() return 1 end } } }"):format(name))
    assert.are.equal(name, eng:load(path))
    local id = eng:start(name, {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  it("is refused by start, and a run key over 1024 bytes too; mend start says so", function()
    local eng = H.new_engine()
    local ok, err = pcall(eng.start, eng, string.rep("w", 513), {})
    assert.is_false(ok)
    has(tostring(err), "a workflow name of 513 bytes, over the longest name of 512 bytes")
    eng:load(H.write_file(H.tmp_dir(), "order.lua", wf_source {}))
    ok, err = pcall(eng.start, eng, "order", {}, { key = string.rep("k", 1025) })
    assert.is_false(ok)
    has(tostring(err), "a run key of 1025 bytes, over the longest key of 1024 bytes")
    local dir = H.tmp_dir()
    H.write_file(dir, "order.lua", wf_source {})
    local rc, out = H.mend_cmd(H.tmp_db(), ("start %s --workflows %s"):format(string.rep("w", 600), H.quote(dir)))
    assert.are.equal(1, rc)
    has(out, "a workflow name of 600 bytes, over the longest name of 512 bytes")
  end)
end)
