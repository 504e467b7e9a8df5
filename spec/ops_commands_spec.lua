-- The everyday commands of an operator, with real `mend` processes on real database files:
-- prune (ended runs go with all their rows in one transaction, nothing unfinished or waiting
-- for a person is touched), history --step/--tail, --version, runs --status checked, the alert
-- command of `mend run` and `mend worker`, and what `mend run` prints on a terminal and off it.
local H = require "spec.helper"
local mend = require "mend"

local MEND, q, sh = H.MEND, H.quote, H.shell

local WORKFLOWS = {
  ok = [[return { name = "ok", steps = {
    { name = "a", execute = function() return 1 end, compensate = function() end },
    { name = "b", execute = function() return 2 end } } }]],
  declined = [[local mend = require "mend"
  return { name = "declined", steps = {
    { name = "a", execute = function() return 1 end, compensate = function() end },
    { name = "b", execute = function() error(mend.fatal("card declined")) end } } }]],
  failed = [[local mend = require "mend"
  return { name = "failed", steps = {
    { name = "a", execute = function() error(mend.fatal("no stock")) end } } }]],
  stuck = [[local mend = require "mend"
  return { name = "stuck", steps = {
    { name = "a", execute = function() return 1 end },
    { name = "b", execute = function() error(mend.compensable("half done", { severity = 3 })) end } } }]],
}

local function setup()
  local dir = H.tmp_dir()
  for name, text in pairs(WORKFLOWS) do H.write_file(dir, name .. ".lua", text) end
  return dir, H.new_db(dir, "ops.db")
end

local function mend_cmd(db, args) return sh(MEND .. " " .. args .. " --db " .. q(db)) end

-- `mend run` of workflow `name`; returns the run id (its status as JSON on stdout, the log on
-- stderr thrown away).
local function run(dir, db, name, expect_rc)
  local rc, out = sh("(" .. MEND .. " run " .. q(dir .. "/" .. name .. ".lua")
                     .. " --clock virtual --json --db " .. q(db) .. " 2>/dev/null)")
  assert.are.equal(expect_rc, rc, out)
  return mend.json.decode(out).id
end

-- (one query: a sqlite3 or psql process each costs more than the counts)
local function rows_of(db, id)
  local row = H.sql(db, ("SELECT (SELECT count(*) FROM runs WHERE id = '%s'),"
    .. " (SELECT count(*) FROM steps WHERE run_id = '%s'),"
    .. " (SELECT count(*) FROM history WHERE run_id = '%s'),"
    .. " (SELECT count(*) FROM dlq WHERE run_id = '%s')"):format(id, id, id, id))[1]
  local runs, steps, history, dlq = row:match("^(%d+)|(%d+)|(%d+)|(%d+)$")
  assert(runs, row)
  return { runs = tonumber(runs), steps = tonumber(steps), history = tonumber(history),
           dlq = tonumber(dlq) }
end

local function totals(db)
  return H.sql(db, "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM steps), "
                   .. "(SELECT count(*) FROM history), (SELECT count(*) FROM dlq)")[1]
end

describe("mend prune", function()
  after_each(H.cleanup)

  -- Runs of every kind, all but `fresh` made 40 days old by their times, as if they had ended
  -- then: prune reads the times that are stored.
  local function population()
    local dir, db = setup()
    local ids = {
      succeeded = run(dir, db, "ok", 0),
      compensated = run(dir, db, "declined", 3),
      failed = run(dir, db, "failed", 3),
      resolved = run(dir, db, "stuck", 4),
      attention = run(dir, db, "stuck", 4),
    }
    local rc, out = mend_cmd(db, "dlq resolve " .. ids.resolved .. " --note " .. q("refunded by hand"))
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "start " .. q(dir .. "/ok.lua"))   -- no worker: it stays unfinished
    assert.are.equal(0, rc, out)
    ids.unfinished = out:match("(%S+)")
    H.sql(db, "UPDATE runs SET created = created - 40 * 86400, updated = updated - 40 * 86400")
    ids.fresh = run(dir, db, "ok", 0)
    return dir, db, ids
  end

  it("removes ended runs with their steps, history and dead letters, and nothing else", function()
    local _, db, ids = population()
    local kept = {}
    for _, k in ipairs { "attention", "unfinished", "fresh" } do kept[k] = rows_of(db, ids[k]) end
    assert.are.equal(1, kept.attention.dlq)
    assert.is_true(kept.unfinished.history > 0)
    assert.are.equal("running", H.sql(db, "SELECT status FROM runs WHERE id = '" .. ids.unfinished .. "'")[1])

    local rc, out = mend_cmd(db, "prune --older-than 30d --json")
    assert.are.equal(0, rc, out)
    local r = mend.json.decode(out)
    assert.are.same({ succeeded = 1, compensated = 1, failed = 1, resolved = 1 }, r.runs)
    assert.are.equal(4, r.total)
    assert.is_false(r.dry_run)
    for _, k in ipairs { "succeeded", "compensated", "failed", "resolved" } do
      assert.are.same({ runs = 0, steps = 0, history = 0, dlq = 0 }, rows_of(db, ids[k]))
    end
    for k, rows in pairs(kept) do assert.are.same(rows, rows_of(db, ids[k]), k) end
    assert.is_true(r.history > 0 and r.steps > 0)
    if not H.is_pg(db) then assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check")) end

    -- a pruned run is gone for every command; the others answer as before
    rc, out = mend_cmd(db, "status " .. ids.succeeded)
    assert.are.equal(1, rc)
    assert.matches("no run " .. ids.succeeded, out, 1, true)
    rc = mend_cmd(db, "status " .. ids.attention)
    assert.are.equal(0, rc)
    local dlq = mend.json.decode(select(2, mend_cmd(db, "dlq --json")))
    assert.are.equal(1, #dlq)
    assert.are.equal(ids.attention, dlq[1].run_id)

    -- again: nothing is left to prune
    rc, out = mend_cmd(db, "prune --older-than 30d")
    assert.are.equal(0, rc, out)
    assert.matches("nothing to prune", out)
  end)

  it("--dry-run reports the same counts and removes nothing", function()
    local _, db = population()
    local before = totals(db)
    local rc, out = mend_cmd(db, "prune --older-than 30d --dry-run --json")
    assert.are.equal(0, rc, out)
    local dry = mend.json.decode(out)
    assert.is_true(dry.dry_run)
    assert.are.same({ succeeded = 1, compensated = 1, failed = 1, resolved = 1 }, dry.runs)
    assert.are.equal(before, totals(db))
    rc, out = mend_cmd(db, "prune --older-than 30d --dry-run")
    assert.are.equal(0, rc, out)
    assert.matches("would prune 4 runs", out)
    assert.matches("1 succeeded, 1 compensated, 1 failed, 1 resolved", out, 1, true)
    assert.matches("nothing was removed", out)
    assert.are.equal(before, totals(db))

    rc, out = mend_cmd(db, "prune --older-than 30d --json")
    assert.are.equal(0, rc, out)
    local done = mend.json.decode(out)
    for _, k in ipairs { "runs", "steps", "history", "dlq", "total" } do
      assert.are.same(dry[k], done[k], k)
    end
  end)

  it("takes only the runs of --status, and only those older than --older-than", function()
    local _, db, ids = population()
    local rc, out = mend_cmd(db, "prune --older-than 30d --status failed")
    assert.are.equal(0, rc, out)
    assert.matches("pruned 1 run that ended before .*: 1 failed", out)
    assert.are.equal(0, rows_of(db, ids.failed).runs)
    assert.are.equal(1, rows_of(db, ids.succeeded).runs)
    -- 41 days is older than all of them: none goes
    rc, out = mend_cmd(db, "prune --older-than 41d --json")
    assert.are.equal(0, rc, out)
    assert.are.equal(0, mend.json.decode(out).total)
    -- 12 hours: the 40-day-old ones go, the fresh one (ended seconds ago) stays
    rc, out = mend_cmd(db, "prune --older-than 12h --json")
    assert.are.equal(0, rc, out)
    assert.are.equal(3, mend.json.decode(out).total)
    assert.are.equal(1, rows_of(db, ids.fresh).runs)
    if not H.is_pg(db) then assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check")) end
  end)

  it("refuses what it cannot do, as usage errors (exit 2)", function()
    local _, db = setup()
    if not H.is_pg(db) then H.sql(db, "PRAGMA user_version") end   -- the file exists
    local cases = {
      { "prune", "%-%-older%-than is required" },
      { "prune --older-than 30", "duration like 30d, 12h, 90m or 45s, got 30" },
      { "prune --older-than 3x", "got 3x" },
      -- 400 digits read as infinity: "no runs ended before -" had been its answer
      { "prune --older-than " .. ("9"):rep(400) .. "d", "a finite duration, got 99999" },
      { "prune --older-than 1d --status running",
        "succeeded, compensated, failed, resolved" },
      { "prune --older-than 1d --status needs_attention",
        "succeeded, compensated, failed, resolved" },
    }
    for _, c in ipairs(cases) do
      local rc, out = mend_cmd(db, c[1])
      assert.are.equal(2, rc, c[1] .. ": " .. out)
      assert.matches(c[2], out)
    end
  end)
end)

describe("mend history --step and --tail", function()
  after_each(H.cleanup)

  it("shows one step's events, the last N, or both", function()
    local dir, db = setup()
    local id = run(dir, db, "stuck", 4)
    local function events(args)
      local rc, out = mend_cmd(db, "history " .. id .. " --json " .. args)
      assert.are.equal(0, rc, out)
      return mend.json.decode(out)
    end
    local all = events("")
    local of_a = events("--step a")
    assert.is_true(#of_a >= 2)
    for _, e in ipairs(of_a) do assert.are.equal("a", e.step) end
    local n_a = 0
    for _, e in ipairs(all) do n_a = n_a + (e.step == "a" and 1 or 0) end
    assert.are.equal(n_a, #of_a)
    assert.are.same({ all[#all - 1], all[#all] }, events("--tail 2"))
    local of_b = events("--step b")
    assert.are.same({ of_b[#of_b] }, events("--step b --tail 1"))
    assert.are.same(all, events("--tail 1000"))

    -- the text form keeps the times since the run's start
    local rc, out = mend_cmd(db, "history " .. id .. " --step b --tail 1")
    assert.are.equal(0, rc, out)
    local lines = {}
    for line in out:gmatch("  %+%S+%s+b%s[^\n]*") do lines[#lines + 1] = line end
    assert.are.equal(1, #lines, out)

    rc, out = mend_cmd(db, "history " .. id .. " --step nope")
    assert.are.equal(1, rc, out)
    assert.matches("has no step nope %(its steps: a, b%)", out)
    -- refused before anything is printed: the run's outcome and "timeline:" came out first
    assert.is_nil(out:find("timeline:", 1, true), out)
    rc, out = mend_cmd(db, "history " .. id .. " --tail 0")
    assert.are.equal(2, rc, out)
    assert.matches("%-%-tail must be a whole number from 1 to 10000, got 0", out)
  end)
end)

describe("mend --version and mend runs --status", function()
  after_each(H.cleanup)

  it("--version prints the project's version, which --help shows too", function()
    local cmake = H.slurp("CMakeLists.txt")
    local version = cmake:match("project%(mend VERSION ([%d%.]+)")
    assert.is_not_nil(version)
    local rc, out = sh(MEND .. " --version")
    assert.are.equal(0, rc)
    assert.are.equal("mend " .. version .. "\n", out)
    rc, out = sh(MEND .. " --help")
    assert.are.equal(0, rc)
    assert.matches("mend " .. version:gsub("%.", "%%."), out)
    assert.matches("prune", out)
  end)

  it("a status no run can have is a usage error naming the valid ones", function()
    local dir, db = setup()
    run(dir, db, "ok", 0)
    local rc, out = mend_cmd(db, "runs --status bogus")
    assert.are.equal(2, rc, out)
    assert.matches("--status bogus", out, 1, true)
    assert.matches("running, compensating, succeeded, compensated, failed, needs_attention, resolved",
                   out, 1, true)
    rc, out = mend_cmd(db, "runs --status succeeded --json")
    assert.are.equal(0, rc, out)
    assert.are.equal(1, #mend.json.decode(out))
  end)
end)

describe("--alert-command", function()
  after_each(H.cleanup)

  -- A script that appends what it reads on stdin to `file`.
  local function alert_script(dir, file)
    local path = H.write_file(dir, "alert.sh", "#!/bin/sh\ncat >> " .. q(file) .. "\n")
    assert(os.execute("chmod +x " .. q(path)))
    return path
  end

  local function alerts_in(file)
    local list = {}
    local f = io.open(file)
    if not f then return list end
    for line in f:lines() do list[#list + 1] = mend.json.decode(line) end
    f:close()
    return list
  end

  it("mend run sends the dead letter's alert to the command, and says where it went", function()
    local dir, db = setup()
    local file = dir .. "/alerts.jsonl"
    local script = alert_script(dir, file)
    local rc, out = sh("(" .. MEND .. " run " .. q(dir .. "/stuck.lua") .. " --clock virtual --db "
                       .. q(db) .. " --alert-command " .. q(script) .. " 2>/dev/null)")
    assert.are.equal(4, rc, out)
    local id = out:match("stuck run (%S+): needs_attention")
    assert.is_truthy(out:find("attention: the alert was sent to the --alert-command", 1, true))
    local alerts = alerts_in(file)
    assert.are.equal(1, #alerts)
    assert.are.equal("dead_letter", alerts[1].kind)
    assert.are.equal(id, alerts[1].run_id)
    assert.are.equal("severity_3", alerts[1].reason)
    assert.are.equal("b", alerts[1].step)

    -- without one, the outcome does not claim anyone was told
    rc, out = sh("(" .. MEND .. " run " .. q(dir .. "/stuck.lua") .. " --clock virtual --db " .. q(db)
                 .. " 2>/dev/null)")
    assert.are.equal(4, rc, out)
    assert.matches("attention: the alert went to the log only %(stderr%): no %-%-alert%-command", out)
    assert.are.equal(1, #alerts_in(file))

    -- a command that fails: the outcome does not claim it told anyone, the log says how it ended
    local errfile = dir .. "/run.err"
    rc, out = sh("(" .. MEND .. " run " .. q(dir .. "/stuck.lua") .. " --clock virtual --db " .. q(db)
                 .. " --alert-command 'cat >/dev/null; exit 3' 2>" .. q(errfile) .. ")")
    assert.are.equal(4, rc, out)
    assert.matches("attention: the %-%-alert%-command failed %(see the log%)", out)
    assert.is_nil(out:find("was sent to", 1, true))
    assert.matches("alert command failed %(exit status 3%)", H.read(errfile))
  end)

  it("mend worker sends the alerts of the runs it executes", function()
    local dir, db = setup()
    local file = dir .. "/alerts.jsonl"
    local script = alert_script(dir, file)
    local wfdir = dir .. "/wf"
    assert(require("lfs").mkdir(wfdir))
    H.write_file(wfdir, "stuck.lua", WORKFLOWS.stuck)
    local rc, pid = sh(MEND .. " worker --workflows " .. q(wfdir) .. " --db " .. q(db)
                       .. " --alert-command " .. q(script) .. " >" .. q(dir .. "/worker.log")
                       .. " 2>&1 & echo $!")
    assert.are.equal(0, rc)
    pid = assert(tonumber(pid:match("(%d+)")))
    local ok, err = pcall(function()
      local rc2, out = mend_cmd(db, "start stuck --workflows " .. q(wfdir))
      assert.are.equal(0, rc2, out)
      local id = out:match("(%S+)")
      rc2, out = mend_cmd(db, "wait " .. id .. " --timeout 30")
      assert.are.equal(4, rc2, out)
      -- the command runs once the dead letter is committed: wait for its line, 10 s at most
      local deadline = H.wall() + 10
      while #alerts_in(file) == 0 and H.wall() < deadline do sh("sleep 0.05") end
      local alerts = alerts_in(file)
      assert.are.equal(1, #alerts, H.slurp(dir .. "/worker.log"))
      assert.are.equal(id, alerts[1].run_id)
      assert.are.equal("dead_letter", alerts[1].kind)
    end)
    os.execute("kill " .. pid)
    assert(ok, err)
  end)
end)

describe("what mend run prints", function()
  after_each(H.cleanup)

  -- stdout and stderr of a command run in a pseudo-terminal (util-linux script).
  local function on_terminal(cmd)
    -- script(1) itself is not ours: in a sanitized build (ASan preloaded into every process)
    -- its own leaks must not decide the exit status; the command inside gets the preload back.
    local preload = os.getenv("LD_PRELOAD")
    if preload then cmd = "LD_PRELOAD=" .. q(preload) .. " " .. cmd end
    local rc, out = sh("env -u LD_PRELOAD script -qec " .. q(cmd) .. " /dev/null")
    return rc, (out:gsub("\r", ""))
  end

  local function occurrences(text, pattern)
    local n = 0
    for _ in text:gmatch(pattern) do n = n + 1 end
    return n
  end

  it("off a terminal: the timeline on stdout, the JSON log on stderr only", function()
    local dir, db = setup()
    local out_file, err_file = dir .. "/out", dir .. "/err"
    local rc = sh("(" .. MEND .. " run " .. q(dir .. "/ok.lua") .. " --clock virtual --db " .. q(db)
                  .. " >" .. q(out_file) .. " 2>" .. q(err_file) .. ")")
    assert.are.equal(0, rc)
    local out, err = H.slurp(out_file), H.slurp(err_file)
    assert.matches("ok run %S+: succeeded\ntimeline:\n", out)
    assert.are.equal(1, occurrences(out, "a%s+pending %-> running"))
    assert.is_nil(out:find("{", 1, true), out)
    local lines = 0
    for line in err:gmatch("[^\n]+") do
      assert.are.equal("table", type(mend.json.decode(line)), line)
      lines = lines + 1
    end
    assert.is_true(lines > 0)
  end)

  it("on a terminal: each transition once, in the timeline or in the live log", function()
    local dir, db = setup()
    local rc, out = on_terminal(MEND .. " run " .. q(dir .. "/declined.lua") .. " --clock virtual --db " .. q(db))
    assert.are.equal(3, rc, out)
    assert.matches("timeline:", out)
    assert.are.equal(1, occurrences(out, "\n  %S+%s+a%s+pending %-> running"), out)
    assert.matches("b #1 step: running %-> failed", out)   -- what went wrong, live
    assert.is_nil(out:find('{"level"', 1, true))

    rc, out = on_terminal(MEND .. " run " .. q(dir .. "/declined.lua") .. " --clock virtual --db "
                          .. q(db) .. " --log-level info")
    assert.are.equal(3, rc, out)
    assert.is_nil(out:find("timeline:", 1, true))
    assert.are.equal(1, occurrences(out, " a #1 step: pending %-> running"), out)
    assert.matches("mend history %S+ prints it again", out)
  end)
end)

describe("a host whose mend Lua files are not where it looks", function()
  it("is told MEND_LUA_DIR and pkg-config --variable=luadir mend", function()
    local host = MEND:gsub("[^/]*$", "") .. "example_game_loop"
    -- A sandboxed host needs mend's Lua files only for mend.sim: a quest that requires it.
    local dir = H.tmp_dir()
    local f = assert(io.open("examples/quest.lua"))
    local text = f:read("a")
    f:close()
    f = assert(io.open(dir .. "/quest.lua", "w"))
    f:write('local sim = require "mend.sim"\n', text)
    f:close()
    -- without the specs' LUA_PATH, through which it would find them anyway
    local rc, out = sh("env -u LUA_PATH -u LUA_PATH_5_4 MEND_LUA_DIR=/nonexistent/mend-lua "
                       .. q(host) .. " " .. q(dir .. "/quest.lua") .. " 1")
    assert.are_not.equal(0, rc)
    assert.is_truthy(out:find("mend's Lua files are not in /nonexistent/mend-lua: set MEND_LUA_DIR "
                              .. "(or mend_options.lua_path) to the directory "
                              .. "`pkg-config --variable=luadir mend` prints", 1, true), out)
  end)
end)
