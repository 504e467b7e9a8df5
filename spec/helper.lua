-- Shared helpers for the specs: temporary databases and directories, engines on the virtual
-- clock that are closed and removed after each test, and small readers of status and history.
--
-- Loaded by busted as --helper and required by each spec (`require "spec.helper"`); it only
-- defines functions, so loading it twice is harmless.

local H = {}

-- Each spec file's seconds on stderr ("spec time: FILE S s"), for tests/specs/weights.txt:
-- tests/specs/run.sh sets MEND_SPEC_TIMES; once a process (this file is loaded twice).
if os.getenv("MEND_SPEC_TIMES") and not package.loaded["spec.helper.times"] then
  package.loaded["spec.helper.times"] = true
  local busted, clock = require "busted", require("system").gettime
  local began = {}
  busted.subscribe({ "file", "start" }, function(file)
    began[file] = clock()
    return nil, true
  end)
  busted.subscribe({ "file", "end" }, function(file)
    io.stderr:write(string.format("\nspec time: %s %.1f s\n", file.name, clock() - (began[file] or clock())))
    return nil, true
  end)
  -- MEND_SPEC_TIMES=tests: also each test of a second or more, to find what makes a file long
  if os.getenv("MEND_SPEC_TIMES") == "tests" then
    busted.subscribe({ "test", "start" }, function(test)
      began[test] = clock()
      return nil, true
    end)
    busted.subscribe({ "test", "end" }, function(test)
      local s = clock() - (began[test] or clock())
      if s >= 1 then io.stderr:write(string.format("\ntest time: %.1f s %s\n", s, test.name)) end
      return nil, true
    end)
  end
end

local open_engines, temp_files, temp_dirs = {}, {}, {}

-- A fresh database path from os.tmpname(). SQLite takes the empty file os.tmpname() creates
-- as a new database. The file and its -wal, -shm and -journal are removed by H.cleanup().
function H.tmp_db()
  local path = os.tmpname()
  temp_files[#temp_files + 1] = path
  return path
end

-- A fresh empty directory, removed (with what it holds) by H.cleanup().
function H.tmp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(require("lfs").mkdir(path))
  temp_dirs[#temp_dirs + 1] = path
  return path
end

-- The database of a test, for the backend the run is for: a fresh SQLite file (dir/name when
-- a directory is given, else a temporary file), or, with MEND_TEST_PG set (the URI of a
-- role that may create schemas: tests/pg/cluster.sh run), a fresh schema of its
-- own in that server's database, whose URI is returned: libpq's `options=-csearch_path=` puts
-- the schema first in the search path of every connection made with it (mend's, psql's), so
-- the test sees nothing of another's (the PostgreSQL store names no schema in its SQL, and its
-- wake-ups have a channel per schema). A schema costs a fraction of a database: CREATE
-- DATABASE copies a template and checkpoints (fsync is on). Dropped by H.cleanup(). A spec
-- that needs what only a file has (its WAL, its locks, its bytes) uses H.tmp_db() and is
-- tagged #sqlite.
H.PG = os.getenv("MEND_TEST_PG")
if H.PG == "" then H.PG = nil end
local pg_schemas, pg_spare, pg_serial = {}, {}, 0

-- The URI of the test server's database `name` (H.PG with its path replaced).
function H.pg_uri(name)
  local base, query = H.PG:match("^(.-)(%?.*)$")
  base, query = base or H.PG, query or ""
  return (base:gsub("^(%a+://[^/]*)/?.*$", "%1")) .. "/" .. name .. query
end

-- The URI of database `name` (default the server's own) with a wrong password: for the
-- specs of a refused login.
function H.pg_wrong_password(name)
  return (H.pg_uri(name or "mend"):gsub("^(%a+://[^:/@]+:)[^@]*@", "%1not-the-password@"))
end

-- Runs statements on the test server as the mend role (its own database), each in a
-- transaction of its own (CREATE and DROP DATABASE refuse to run in one); raises on failure.
local function pg_admin(...)
  local cmd = "psql -X -q -v ON_ERROR_STOP=1 " .. H.quote(H.PG)
  for _, sql in ipairs { ... } do cmd = cmd .. " -c " .. H.quote(sql) end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local text = p:read("a")
  local ok = p:close()
  assert(ok, "psql failed: " .. table.concat({ ... }, "; ") .. ": " .. text)
end

function H.new_db(dir, name)
  if not H.PG then
    if dir then return dir .. "/" .. (name or "mend.db") end
    return H.tmp_db()
  end
  if #pg_spare == 0 then
    -- made eight at a time: a psql process costs as much as the statement
    local tmp = os.tmpname()   -- a unique word for this process's schemas
    os.remove(tmp)
    local made = {}
    for i = 1, 8 do
      pg_spare[i] = ("mend_t%d_%s"):format(pg_serial + 9 - i, tmp:match("([%w_]+)$"):lower())
      made[i] = "CREATE SCHEMA " .. pg_spare[i]
    end
    pg_serial = pg_serial + 8
    pg_admin(table.concat(made, "; "))
  end
  local schema = table.remove(pg_spare)
  pg_schemas[#pg_schemas + 1] = schema
  local uri = H.PG
  -- one parameter only: specs put the URI in single-quoted shell words, where a `&` would end
  -- a command
  return uri .. (uri:find("?", 1, true) and "&" or "?") .. "options=-csearch_path%3D" .. schema
end

-- Schemas made and never handed out are dropped when Lua closes (busted's exit).
H._pg_spare_gc = setmetatable({}, { __gc = function()
  if #pg_spare > 0 then
    local drops = {}
    for i, schema in ipairs(pg_spare) do drops[i] = "DROP SCHEMA IF EXISTS " .. schema end
    pcall(pg_admin, table.concat(drops, "; "))
  end
end })

-- True when db names a PostgreSQL database rather than a file.
function H.is_pg(db)
  return type(db) == "string" and db:match("^postgres") ~= nil
end

-- Writes `text` to dir/name and returns the path.
function H.write_file(dir, name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- An engine on a new temporary database, virtual clock, seed 1; `opts` overrides or adds
-- fields (alert, log, db, ...). Returns the engine and its database path.
function H.new_engine(opts)
  local o = { clock = "virtual", seed = 1 }
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.db == nil then o.db = H.new_db() end
  local eng = require("mend").engine(o)
  open_engines[#open_engines + 1] = eng
  return eng, o.db
end

-- A second engine on an existing database (as after a restart); closed by H.cleanup().
function H.reopen(path, opts)
  local o = { clock = "virtual", seed = 1 }
  for k, v in pairs(opts or {}) do o[k] = v end
  o.db = path
  local eng = require("mend").engine(o)
  open_engines[#open_engines + 1] = eng
  return eng
end

-- An engine whose alert hook appends every event to the returned list.
function H.engine_with_alerts(opts)
  local alerts = {}
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.alert = function(event) alerts[#alerts + 1] = event end
  local eng, path = H.new_engine(o)
  return eng, alerts, path
end

-- Closes an engine now (as at a shutdown); H.cleanup() will not close it again.
function H.close(eng)
  for i = #open_engines, 1, -1 do
    if open_engines[i] == eng then table.remove(open_engines, i) end
  end
  eng:close()
end

-- Closes every engine opened through these helpers and removes every temporary file.
function H.cleanup()
  for i = #open_engines, 1, -1 do
    pcall(function() open_engines[i]:close() end)
    open_engines[i] = nil
  end
  for i = #temp_files, 1, -1 do
    local p = temp_files[i]
    for _, suffix in ipairs { "", "-wal", "-shm", "-journal" } do os.remove(p .. suffix) end
    temp_files[i] = nil
  end
  -- A worker process a test left behind must not keep its schema: the sessions that hold
  -- locks in it are ended first (an idle one fails at its next statement, and its process
  -- stops), and the drop waits 10 s at most for a lock.
  if #pg_schemas > 0 then
    local drops = { "SET lock_timeout = '10s'" }
    for i = #pg_schemas, 1, -1 do
      drops[#drops + 1] = "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l"
        .. " JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace"
        .. " WHERE n.nspname = '" .. pg_schemas[i] .. "' AND l.pid <> pg_backend_pid()"
      drops[#drops + 1] = "DROP SCHEMA IF EXISTS " .. pg_schemas[i] .. " CASCADE"
      pg_schemas[i] = nil
    end
    pcall(pg_admin, table.unpack(drops))
  end
  local lfs = require "lfs"
  for i = #temp_dirs, 1, -1 do
    local d = temp_dirs[i]
    if lfs.attributes(d, "mode") == "directory" then
      for entry in lfs.dir(d) do
        if entry ~= "." and entry ~= ".." then os.remove(d .. "/" .. entry) end
      end
      lfs.rmdir(d)
    end
    temp_dirs[i] = nil
  end
end

-- A workflow definition with one step; `step` gives the step's fields (name defaults to "work").
function H.one_step(name, step, extra)
  step.name = step.name or "work"
  local def = { name = name, steps = { step } }
  for k, v in pairs(extra or {}) do def[k] = v end
  return def
end

-- The step table of a status, by name.
function H.step(status, name)
  for _, s in ipairs(status.steps or {}) do
    if s.name == name then return s end
  end
  return nil
end

-- The history entries of a run that match every field of `filter` ({event=, step=, to=, ...}).
function H.events(eng, run_id, filter)
  local out = {}
  for _, h in ipairs(eng:history(run_id)) do
    local ok = true
    for k, v in pairs(filter or {}) do
      if h[k] ~= v then ok = false break end
    end
    if ok then out[#out + 1] = h end
  end
  return out
end

-- The `delay` of every step event of `step` that chose a wait before another attempt
-- (a step transition into retry_wait), in order.
function H.retry_delays(eng, run_id, step)
  local out = {}
  for _, h in ipairs(H.events(eng, run_id, { event = "step", step = step, to = "retry_wait" })) do
    out[#out + 1] = h.delay
  end
  return out
end

-- "from->to" for every step event of `step`, in order.
function H.transitions(eng, run_id, step)
  local out = {}
  for _, h in ipairs(H.events(eng, run_id, { event = "step", step = step })) do
    out[#out + 1] = tostring(h.from) .. "->" .. tostring(h.to)
  end
  return out
end

-- Index of the first element equal to v, or nil.
function H.index_of(list, v)
  for i, x in ipairs(list) do if x == v then return i end end
  return nil
end

-- The dead-letter entry of a run, or nil.
function H.dlq_entry(eng, run_id)
  for _, d in ipairs(eng:dlq()) do
    if d.run_id == run_id then return d end
  end
  return nil
end

-- The breaker row of a key, or nil.
function H.breaker(eng, key)
  for _, b in ipairs(eng:breakers()) do
    if b.key == key then return b end
  end
  return nil
end

-- Alerts of one kind.
function H.alerts_of(alerts, kind)
  local out = {}
  for _, a in ipairs(alerts) do if a.kind == kind then out[#out + 1] = a end end
  return out
end

-- Runs a query with the sqlite3 command-line shell against a database file and returns its
-- output lines: the specs check what is committed with plain SQL, as an operator would.
local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- On a PostgreSQL database (H.is_pg), psql prints the rows in the same shape (columns joined
-- by '|', no header); the query must then be one both dialects take.
function H.sql(path, query)
  local cmd = "sqlite3 -batch " .. shell_quote(path) .. " " .. shell_quote(query)
  if H.is_pg(path) then
    cmd = "psql -X -q -A -t -F '|' -v ON_ERROR_STOP=1 " .. shell_quote(path) .. " -c "
      .. shell_quote(query)
  end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  local ok, how, code = p:close()
  assert(ok, string.format("sqlite3 failed (%s %s): %s", tostring(how), tostring(code),
    table.concat(lines, "\n")))
  return lines
end

-- Gives the SQLite file at path the runs table a file of schema 15 has once this mend opened it
-- (layout `column`: run_key's UNIQUE is the column's), its rows and their rowids as they were:
-- what mend db upgrade changes, and every reader must read alike.
function H.runs_key_column(path)
  H.sql(path, [[
BEGIN;
CREATE TABLE r15(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,
  run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,
  attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,
  cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL, step_names TEXT,
  workflow_version INTEGER, unavailable TEXT, parent_run TEXT, parent_step TEXT);
INSERT INTO r15(rowid, id, workflow, version, source, run_key, status, input, error, attention,
  reason, owner, lease_until, cancel_requested, created, updated, step_names, workflow_version,
  unavailable, parent_run, parent_step) SELECT rowid, id, workflow, version, source, run_key,
  status, input, error, attention, reason, owner, lease_until, cancel_requested, created,
  updated, step_names, workflow_version, unavailable, parent_run, parent_step FROM runs;
DROP TABLE runs;
ALTER TABLE r15 RENAME TO runs;
CREATE INDEX runs_live ON runs(created) WHERE status IN ('running', 'compensating');
CREATE INDEX runs_cancel ON runs(owner) WHERE cancel_requested = 1;
CREATE INDEX runs_free ON runs(created) WHERE owner IS NULL AND status IN ('running', 'compensating');
CREATE INDEX runs_parent ON runs(parent_run) WHERE parent_run IS NOT NULL;
UPDATE meta SET value = 'column' WHERE key = 'runs_key_layout';
COMMIT;]])
end

-- The mend binary under test ($MEND_BIN, set by ctest).
H.MEND = os.getenv("MEND_BIN") or "./build/mend"

-- A word for sh: single-quoted.
function H.quote(s)
  return "'" .. tostring(s):gsub("'", [['\'']]) .. "'"
end

-- The whole content of a file.
function H.slurp(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

-- Runs a shell command; returns its exit code and its output (stdout and stderr together).
function H.shell(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"rc=$?\""))
  local text = p:read("a")
  p:close()
  return tonumber(text:match("rc=(%d+)%s*$")), (text:gsub("rc=%d+%s*$", ""))
end

-- Wall-clock seconds (luasystem ships with busted).
-- Polls pred every 50 ms until it is true, for at most `seconds` of wall time.
function H.wait_for(what, pred, seconds)
  local deadline = H.wall() + seconds
  while H.wall() < deadline do
    if pred() then return end
    os.execute("sleep 0.05")
  end
  error("timed out waiting for " .. what)
end

-- `mend ARGS --db DB`: its exit status and output (H.shell).
function H.mend_cmd(db, args)
  return H.shell(("%s %s --db %s"):format(H.MEND, args, H.quote(db)))
end

-- `mend ARGS --db DB` run in directory `dir` (nil: here): its exit status, stdout and stderr
-- apart (H.mend_cmd gives them together).
function H.mend_in(dir, db, args)
  local errfile = os.tmpname()
  local cmd = ("%s%s %s --db %s 2>%s"):format(dir and ("cd " .. H.quote(dir) .. " && ") or "",
                                             H.MEND, args, H.quote(db), H.quote(errfile))
  local p = assert(io.popen(cmd, "r"))
  local stdout = p:read("a")
  local _, _, code = p:close()
  local stderr = H.slurp(errfile)
  os.remove(errfile)
  return code, stdout, stderr
end

-- A `mend worker` on DB serving the workflows in DIR (poll 0.05 s), its stderr appended to
-- LOG; its pid.
function H.spawn_worker(db, dir, log)
  local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 2>>%s' >/dev/null & echo $!")
    :format(H.MEND, H.quote(db), H.quote(dir), H.quote(log)))
  local pid = p:read("l")
  p:close()
  return pid
end

-- A `mend worker ARGS` on DB serving the workflows in DIR, its stdout and stderr written to LOG
-- (LOG.pid keeps its pid); its pid, a number.
function H.start_worker(db, dir, log, args)
  local pid_file = log .. ".pid"
  os.execute(("%s worker --db %s --workflows %s %s >%s 2>&1 & echo $! >%s")
    :format(H.MEND, H.quote(db), H.quote(dir), args or "", H.quote(log), H.quote(pid_file)))
  return assert(H.read_number(pid_file), "the worker's pid")
end

-- The number a file holds (a pid, a time from `date +%s.%N`), or nil while there is none.
function H.read_number(path)
  local f = io.open(path)
  if not f then return nil end
  local n = tonumber(f:read("a"))
  f:close()
  return n
end

-- How many runs of the database at PATH have succeeded.
function H.succeeded(path)
  return tonumber(H.sql(path, "SELECT count(*) FROM runs WHERE status = 'succeeded'")[1])
end

-- `mend status RUN --json`, decoded.
function H.status_json(db, id)
  local rc, out = H.mend_cmd(db, "status " .. id .. " --json")
  if rc ~= 0 then error(("mend status %s exited %s: %s"):format(id, tostring(rc), out), 2) end
  return require("mend").json.decode(out)
end

-- Whether process pid runs: a zombie (ended, not yet reaped by the shell that started it in
-- the background) does not.
function H.alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local state = f:read("a"):match("^%d+ %b() (%a)")
  f:close()
  return state ~= nil and state ~= "Z" and state ~= "X"
end

-- After a test that started processes (their pids in `pids`): each still alive is killed with
-- SIGKILL (it must not outlive the test, nor hold the database H.cleanup removes), the list is
-- emptied for the next test, and H.cleanup() runs.
function H.kill_and_cleanup(pids)
  for i = #pids, 1, -1 do
    os.execute("kill -9 " .. pids[i] .. " 2>/dev/null")
    pids[i] = nil
  end
  H.cleanup()
end

-- SIGTERM to a worker, and its exit within 5 s (it gives its runs back first).
function H.stop_worker(pid)
  os.execute("kill -TERM " .. pid)
  for _ = 1, 500 do
    if not os.execute("kill -0 " .. pid .. " 2>/dev/null") then return end
    os.execute("sleep 0.01")
  end
  error("worker " .. pid .. " did not stop")
end

-- The text of a file, or "" when there is none (yet).
function H.read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

function H.wall()
  return require("system").gettime()
end

return H
