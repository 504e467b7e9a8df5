-- `mend worker --sandbox [--memory-limit N] [--instruction-budget N]` (issue 16), with real
-- worker processes: the workflows' code runs in a sandboxed Lua state of the worker's engine's
-- own. Poison runs served by one worker (a memory hog past --memory-limit, a loop that catches
-- the budget's error, attempts to escape through io, require "io", os.execute and
-- mend.engine) end, the limits' as dead letters (workflow_error, alerted) and the escapes as
-- failures naming what is not there; a good run served by the same worker succeeds, the worker
-- stays up, and nothing is written outside the scratch directory. A Lua error outside every
-- protected call of the engine's state (a bug of mend's, made by the "execute:N:panic"
-- failpoint) breaks the engine: the worker exits 1 saying so, never aborting, and every
-- method of a sandboxed mend.engine{} refuses a broken engine but close. Both backends.

local H = require "spec.helper"

local MEND, q, sh = H.MEND, H.quote, H.shell

local GOOD = [[
return { name = "good", steps = {
  { name = "a", execute = function() return { ok = true } end },
  { name = "b", execute = function(ctx) return ctx.results.a end } } }
]]

-- OUTSIDE: a directory the steps try to write in, which must stay empty.
local POISON = [[
local mend = require "mend"
local OUTSIDE = %q
return { name = "poison", steps = { { name = "s", retry = { max_attempts = 1 },
  execute = function(ctx, input)
    local how = input.how
    if how == "hog" then
      local t = {} for i = 1, 1000 do t[i] = string.rep("x", 1 << 20) .. i end
    elseif how == "spin" then
      while true do pcall(function() while true do end end) end
    elseif how == "io" then
      local f = io.open(OUTSIDE .. "/io", "w") f:write("written") f:close()
    elseif how == "require_io" then
      local f = require("io").open(OUTSIDE .. "/require_io", "w") f:write("written") f:close()
    elseif how == "execute" then
      os.execute("touch " .. OUTSIDE .. "/execute")
    elseif how == "engine" then
      mend.engine{ db = OUTSIDE .. "/second.db" }
    end
  end } } }
]]

local MEMORY, BUDGET = 16 << 20, 100000000

local function alive(pid) return (sh("kill -0 " .. pid)) == 0 end

local function spawn(env, db, wf, log, flags)
  local _, out = sh(("%s %s worker --db %s --workflows %s --poll 0.05 %s >%s 2>&1 & echo $!")
    :format(env, MEND, q(db), q(wf), flags, q(log)))
  return assert(tonumber(out:match("%d+")))
end

local function start(db, wf, name, input)
  local rc, out = sh(("%s start %s --db %s --workflows %s --input %s"):format(MEND, name, q(db),
                     q(wf), q(input or "{}")))
  assert.are.equal(0, rc, out)
  return out:match("(%S+)%s*$")   -- after what stderr says (the mark sandboxed it)
end

local function listing(dir)
  local names = {}
  for name in require("lfs").dir(dir) do
    if name ~= "." and name ~= ".." then names[#names + 1] = name end
  end
  return names
end

describe("mend worker --sandbox", function()
  local pid
  after_each(function()
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    pid = nil
    H.cleanup()
  end)

  it("serves a good run beside poison runs: limits make dead letters, escapes fail, nothing is written", function()
    local dir = H.tmp_dir()
    local wf, outside, db = dir .. "/wf", dir .. "/outside", H.new_db(dir, "jobs.db")
    assert(require("lfs").mkdir(wf))
    assert(require("lfs").mkdir(outside))
    H.write_file(wf, "good.lua", GOOD)
    H.write_file(wf, "poison.lua", POISON:format(outside))
    local alerts, log = dir .. "/alerts", dir .. "/worker.log"
    H.write_file(dir, "alert.sh", "cat >> " .. q(alerts) .. "; echo >> " .. q(alerts) .. "\n")
    pid = spawn("", db, wf, log, ("--sandbox --memory-limit %d --instruction-budget %d --alert-command %s")
      :format(MEMORY, BUDGET, q("sh " .. dir .. "/alert.sh")))

    local hows = { "hog", "spin", "io", "require_io", "execute", "engine" }
    local ids = {}
    for _, how in ipairs(hows) do ids[how] = start(db, wf, "poison", ('{"how":%q}'):format(how)) end
    local good = start(db, wf, "good")

    local ended = { failed = true, needs_attention = true }
    H.wait_for("every run to end", function()
      for _, id in pairs(ids) do
        if not ended[H.status_json(db, id).status] then return false end
      end
      return H.status_json(db, good).status == "succeeded"
    end, 30)
    assert.is_true(alive(pid), H.read(log))

    local st = H.status_json(db, ids.hog)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("workflow_error", st.reason)
    assert.matches(("step exceeded the memory limit (%d bytes)"):format(MEMORY), st.error, 1, true)
    st = H.status_json(db, ids.spin)
    assert.are.equal("needs_attention", st.status)
    assert.are.equal("workflow_error", st.reason)
    assert.matches(("step exceeded its instruction budget (%d instructions)"):format(BUDGET), st.error, 1, true)
    local _, dlq = sh(("%s dlq --db %s --json"):format(MEND, q(db)))
    assert.is_truthy(dlq:find(ids.hog, 1, true))
    assert.is_truthy(dlq:find(ids.spin, 1, true))
    H.wait_for("the dead letters' alerts", function()
      local text = H.read(alerts)
      return text:find(ids.hog, 1, true) and text:find(ids.spin, 1, true)
    end, 10)

    -- what the sandbox does not hold is not there: the step's own error says which
    local missing = { io = "global 'io'", require_io = 'module "io" not found',
                      execute = "field 'execute'", engine = "field 'engine'" }
    for how, what in pairs(missing) do
      st = H.status_json(db, ids[how])
      assert.are.equal("failed", st.status, how)
      assert.matches(what, st.error, 1, true)
    end
    assert.are.same({}, listing(outside))

    assert.are.equal(0, (sh("kill -TERM " .. pid)))
    H.wait_for("the worker to stop", function() return not alive(pid) end, 15)
    pid = nil
  end)

  it("refuses --memory-limit without --sandbox", function()
    local rc, out = sh(("%s worker --db %s --memory-limit 1000000"):format(MEND, q(H.new_db())))
    assert.are.equal(2, rc, out)
    assert.matches("mend: --memory-limit needs --sandbox", out, 1, true)
  end)

  it("exits 1 saying its engine broke when the engine's state panics as it serves, never aborting", function()
    local dir = H.tmp_dir()
    local wf, db, log = dir .. "/wf", H.new_db(dir, "jobs.db"), dir .. "/worker.log"
    assert(require("lfs").mkdir(wf))
    H.write_file(wf, "good.lua", GOOD)
    local id = start(db, wf, "good")
    local rc, out = sh(("MEND_FAILPOINT=execute:1:panic timeout 30 %s worker --sandbox --db %s"
                        .. " --workflows %s --log-level error"):format(MEND, q(db), q(wf)))
    assert.are.equal(1, rc, out)
    -- its last words: nothing after them (an abort, a sanitizer's report of the teardown)
    assert.matches("\nmend: [^\n]*the engine is broken: [^\n]*failpoint execute[^\n]*\n$", "\n" .. out)
    -- the run, left unfinished, is the next worker's
    pid = spawn("", db, wf, log, "--sandbox")
    H.wait_for("the run to succeed", function() return H.status_json(db, id).status == "succeeded" end, 15)
  end)

  -- server:run() turns the engine's loop outside every method: the panic aborted the process.
  it("breaks the engine, never aborting, when its state panics under mend.serve's server:run()", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "jobs.db")
    local wf = H.write_file(dir, "good.lua", GOOD)
    local script = H.write_file(dir, "serve.lua", table.concat({
      ("eng = require('mend').engine{ sandbox = true, db = %q }"):format(db),
      ("eng:load(%q)"):format(wf),
      "id = eng:start('good', {})",
      "srv = require('mend.serve').listen(eng, { address = '127.0.0.1:0' })",
      "ok, err = pcall(srv.run, srv)",
      "print('run', ok, err)",
      "print('status', pcall(eng.status, eng, id))",
      "srv:close()",
      "print('close', pcall(eng.close, eng))",
    }, "\n") .. "\n")
    local rc, out = sh(("MEND_FAILPOINT=execute:1:panic timeout 20 %s repl < %s 2>&1")
      :format(MEND, q(script)))
    assert.are.equal(0, rc, out)
    assert.matches("\nrun\tfalse\tthe engine is broken: [^\n]*failpoint execute", out)
    assert.matches("\nstatus\tfalse\tthe engine is broken: ", out)
    assert.matches("\nclose\ttrue\n", out)
  end)

  it("is mend.engine{sandbox = true}'s rule: every method refuses a broken engine, close works", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "jobs.db")
    H.write_file(dir, "good.lua", GOOD)
    local script = H.write_file(dir, "host.lua", [==[
      local mend = require "mend"
      local eng = mend.engine{ sandbox = true, db = arg[1], clock = "virtual" }
      eng:load(arg[2])
      local id = eng:start("good", {})
      local calls = {
        { "run" }, { "status", id }, { "history", id }, { "runs", {} }, { "dlq" },
        { "breakers" }, { "audit" }, { "workflows" }, { "loaded_version", "good" },
        { "now" }, { "parked" }, { "in_flight" }, { "log", "info", "x", "y" },
        { "alert", { kind = "x" } }, { "cancel", id }, { "signal", id, "go" },
        { "resume", id }, { "recover" }, { "advance", 1 }, { "stop" },
        { "prune", { older_than = 0 } }, { "serve", { poll = 0.05 } }, { "wait", id },
      }
      for _, c in ipairs(calls) do
        local ok, err = pcall(eng[c[1]], eng, table.unpack(c, 2))
        print(c[1], ok, (tostring(err):gsub("\n", " ")))
      end
      eng:close()
      print("closed", tostring(eng))
    ]==])
    local rc, out = sh(("MEND_FAILPOINT=execute:1:panic timeout 20 lua5.4 %s %s %s")
      :format(q(script), q(db), q(dir .. "/good.lua")))
    assert.are.equal(0, rc, out)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      if line:match("^closed") then
        assert.are.equal("closed\tmend.engine (closed)", line)
      else
        n = n + 1
        assert.matches("^[%w_]+\tfalse\t.*the engine is broken: .*failpoint execute", line)
      end
    end
    assert.are.equal(23, n, out)
  end)
end)
