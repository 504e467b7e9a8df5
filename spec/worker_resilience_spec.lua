-- What a run's code or a broken file can do to a real `mend worker` (issue 16): nothing that
-- stops it. A workflow file that does not load is logged and alerted once and the others are
-- served; fixed, it is taken up without a restart. A run whose step raises an error object
-- with a raising or endless __tostring, or loops for ever under --instruction-budget, is a
-- dead letter (workflow_error, alerted) with a clear message while a good run beside it
-- succeeds, and the worker goes on.

local H = require "spec.helper"

local MEND, q, sh = H.MEND, H.quote, H.shell

local GOOD = [[
return { name = "good", steps = {
  { name = "a", execute = function() return { ok = true } end },
  { name = "nap", sleep = 0.2 },
  { name = "b", execute = function(ctx) return ctx.results.a end } } }
]]

local BROKEN = [[
return { name = "fixed", steps = { { name = "a", execute = function() return 1 end } }
]]   -- one closing brace short

local FIXED = [[
return { name = "fixed", steps = { { name = "a", execute = function() return 1 end } } }
]]

local POISON = [[
local mend = require "mend"
return { name = "poison", steps = {
  { name = "tostring_raises", execute = function(ctx, input)
      if input.how == "raise" then
        error(setmetatable({}, { __tostring = function() error("boom") end }))
      elseif input.how == "loop" then
        error(setmetatable({}, { __tostring = function() while true do end end }))
      elseif input.how == "spin" then
        while true do pcall(function() while true do end end) end
      elseif input.how == "metatable" then
        getmetatable(mend.fatal("x")).__index = function() error("boom") end
      end
    end } } }
]]

local function alive(pid) return (sh("kill -0 " .. pid)) == 0 end

describe("a worker", function()
  local pid
  after_each(function()
    if pid then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    pid = nil
    H.cleanup()
  end)

  it("serves good workflows beside a broken file and poison runs, and takes the fixed file up", function()
    local dir = H.tmp_dir()
    local wf, db = dir .. "/wf", H.new_db(dir, "jobs.db")
    assert(require("lfs").mkdir(wf))
    H.write_file(wf, "good.lua", GOOD)
    H.write_file(wf, "fixed.lua", BROKEN)
    H.write_file(wf, "poison.lua", POISON)
    local alerts, log = dir .. "/alerts", dir .. "/worker.log"
    H.write_file(dir, "alert.sh", "cat >> " .. q(alerts) .. "; echo >> " .. q(alerts) .. "\n")
    local _, out = sh(string.format(
      "%s worker --db %s --workflows %s --instruction-budget 5000000 --alert-command %s"
      .. " >%s 2>&1 & echo $!", MEND, q(db), q(wf), q("sh " .. dir .. "/alert.sh"), q(log)))
    pid = assert(tonumber(out:match("%d+")))

    -- the broken file is logged once and alerted once; the worker serves the others
    H.wait_for("the load alert", function() return H.read(alerts):find("workflow_load_failed", 1, true) end, 10)
    local text = H.read(log)
    assert.matches('"level":"error"[^\n]*fixed%.lua:%d+', text)
    assert.is_true(alive(pid))

    local ids = {}
    for _, how in ipairs({ "raise", "loop", "spin", "metatable" }) do
      local rc, id = sh(string.format("%s start poison --db %s --workflows %s --input '{\"how\":%q}'",
                                      MEND, q(db), q(wf), how))
      assert.are.equal(0, rc, id)
      ids[how] = id:match("%S+")
    end
    local rc, good = sh(string.format("%s start good --db %s --workflows %s", MEND, q(db), q(wf)))
    assert.are.equal(0, rc, good)
    good = good:match("%S+")

    local function status(id)
      local _, json = sh(string.format("%s status %s --db %s --json", MEND, id, q(db)))
      return require("mend").json.decode(json)
    end
    -- what the engine had to stop is a dead letter (workflow_error) for a person; an ordinary
    -- error of the step's own fails the run as any error does
    local ended = { failed = true, needs_attention = true }
    H.wait_for("every run to end", function()
      for _, id in pairs(ids) do
        if not ended[status(id).status] then return false end
      end
      return status(good).status == "succeeded"
    end, 20)
    for _, how in ipairs({ "raise", "loop", "spin" }) do
      local st = status(ids[how])
      assert.are.equal("needs_attention", st.status, how)
      assert.are.equal("workflow_error", st.reason, how)
    end
    assert.matches("__tostring failed: [^\n]*boom", status(ids.raise).error)
    assert.matches("__tostring failed: [^\n]*exceeded its instruction budget", status(ids.loop).error)
    assert.matches("step exceeded its instruction budget %(5000000 instructions%)", status(ids.spin).error)
    assert.are.equal("failed", status(ids.metatable).status)
    assert.matches("attempt to index a string value", status(ids.metatable).error)
    local _, dlq = sh(string.format("%s dlq --db %s --json", MEND, q(db)))
    for _, how in ipairs({ "raise", "loop", "spin" }) do
      assert.is_truthy(dlq:find(ids[how], 1, true), how)
    end
    H.wait_for("the dead letters' alerts", function()
      local n = 0
      for _ in H.read(alerts):gmatch('"kind":"dead_letter"') do n = n + 1 end
      return n == 3
    end, 10)
    assert.is_true(alive(pid))

    -- the file fixed: the worker loads it within its next look (every 2 s) and runs it
    H.write_file(wf, "fixed.lua", FIXED)
    H.wait_for("the fixed file to load", function() return H.read(log):find("loaded [^\n]*fixed%.lua") end, 10)
    local fixed
    rc, fixed = sh(string.format("%s start fixed --db %s --workflows %s", MEND, q(db), q(wf)))
    assert.are.equal(0, rc, fixed)
    fixed = fixed:match("%S+")
    H.wait_for("the fixed workflow's run", function() return status(fixed).status == "succeeded" end, 10)

    -- one alert for the broken text, not one a look
    local n = 0
    for _ in H.read(alerts):gmatch("workflow_load_failed") do n = n + 1 end
    assert.are.equal(1, n)
    assert.is_true(alive(pid))
    assert.are.equal(0, (sh("kill -TERM " .. pid)))
    H.wait_for("the worker to stop", function() return not alive(pid) end, 15)
    pid = nil
  end)

  -- A worker on a new database serving good.lua from a folder of its own, beside what `more`
  -- (given the folder) puts there first: the folder, the database and the worker's log.
  local function good_worker(more, args)
    local dir = H.tmp_dir()
    local wf, db = dir .. "/wf", H.new_db(dir, "jobs.db")
    assert(require("lfs").mkdir(wf))
    H.write_file(wf, "good.lua", GOOD)
    if more then more(wf) end
    local log = dir .. "/worker.log"
    pid = H.start_worker(db, wf, log, args)
    return dir, wf, db, log
  end

  -- A run of good (its file in folder `from`) started, and served to its end by the worker.
  local function good_run_succeeds(db, from, what)
    local rc, id = sh(string.format("%s start good --db %s --workflows %s", MEND, q(db), q(from)))
    assert.are.equal(0, rc, id)
    id = id:match("%S+")
    H.wait_for(what, function() return H.status_json(db, id).status == "succeeded" end, 10)
  end

  it("serves the workflows beside a .lua entry that is not a file, and stops on SIGTERM", function()
    -- A named pipe (or a socket) opened to be read blocks until a writer comes: the worker hung
    -- in its first look at the folder, before serving anything, and SIGTERM did not stop it.
    local _, wf, db = good_worker(function(wf)
      assert.are.equal(0, (sh("mkfifo " .. q(wf .. "/pipe.lua"))))
      assert(require("lfs").mkdir(wf .. "/folder.lua"))
    end)
    good_run_succeeds(db, wf, "the good run")
    assert.are.equal(0, (sh("kill -TERM " .. pid)))
    H.wait_for("the worker to stop", function() return not alive(pid) end, 15)
    pid = nil
  end)
  it("says once that its workflows directory went, serves what it loaded, and says when it is back", function()
    local dir, wf, db, log = good_worker(nil, "--log-level debug")
    -- the worker has loaded the directory once it ran a run of it (its log says nothing of a
    -- load; the log file and a fixed wait of 0.5 s did not tell it on a loaded machine, and
    -- the directory went before the worker's start read it)
    good_run_succeeds(db, wf, "the worker's first run")
    assert.are.equal(0, (sh("rm -rf " .. q(wf))))
    H.wait_for("the warning", function()
      return (H.read(log) or ""):find("cannot read the workflows directory " .. wf, 1, true)
    end, 10)
    -- two more looks (every 2 s, each a debug line): said once, not at each
    local again = "looked again at " .. wf:gsub("%p", "%%%0") .. ": still unreadable"
    H.wait_for("two more looks", function()
      local _, looks = H.read(log):gsub(again, "")
      return looks >= 2
    end, 15)
    local n = 0
    for _ in H.read(log):gmatch("cannot read the workflows directory") do n = n + 1 end
    assert.are.equal(1, n, H.read(log))
    assert.matches("serving the workflows loaded before", H.read(log))
    -- what it loaded is still served: a run started with its file elsewhere runs here
    local other = dir .. "/other"
    assert(require("lfs").mkdir(other))
    H.write_file(other, "good.lua", GOOD)
    good_run_succeeds(db, other, "the good run")
    assert(require("lfs").mkdir(wf))
    H.wait_for("the directory back", function()
      return H.read(log):find("can be read again", 1, true)
    end, 10)
    assert.is_true(alive(pid))
  end)
end)
