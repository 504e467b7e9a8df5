-- Locks held by another PostgreSQL session, for the specs of what mend does meanwhile: a psql
-- process runs SQL in a transaction it keeps open (120 s), named by its application_name so
-- that release() ends it with pg_terminate_backend; and a worker whose batch waits for one.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local assert = require "luassert"

local M = {}
local q, sh = H.quote, H.shell
local holds = {}

-- Runs `sql` (statements; `%HELD%` in it is the file that says the locks are held, touched
-- after `sql` when it holds no `\! touch %HELD%`) in a transaction psql keeps open; returns its
-- application name once that file is there.
function M.hold(dir, db, sql)
  local name = ("mend-hold-%d-"):format(#holds + 1) .. dir:match("([%w_]+)$")
  local held = dir .. "/" .. name
  if not sql:find("%HELD%", 1, true) then sql = sql .. ";\n\\! touch %HELD%" end
  local script = H.write_file(dir, name .. ".sql", ("SET statement_timeout = 0;\nBEGIN;\n%s\n"
    .. "SELECT pg_sleep(120);\nCOMMIT;\n"):format((sql:gsub("%%HELD%%", held))))
  os.execute(("PGAPPNAME=%s psql -X -q %s -f %s >/dev/null 2>&1 &"):format(q(name), q(db), q(script)))
  holds[#holds + 1] = name
  H.wait_for("psql to hold the lock", function() return sh("test -e " .. q(held)) == 0 end, 10)
  return name
end

-- A session the spec starts itself (its application name), ended by release() too.
function M.adopt(name)
  holds[#holds + 1] = name
end

-- A worker (`mend <command>`, worker by default, S.start's) whose batch waits for a run's row
-- that psql holds (hold): the run waits for a signal, the signal lands, and the worker's batch
-- that advances the run meets the lock, as its log says. Returns the worker's base URL, its
-- process id and the run's id.
function M.batch_waits(dir, db, command)
  local base, pid = S.start(dir, db, nil, command or "worker")
  local code, body = S.post(base, "/api/v1/runs", { workflow = "wait", input = {} })
  assert.are.equal(201, code)
  local id = body.id
  H.wait_for("the run to wait for its signal", function()
    return S.log(dir):find('"message":"pending %-> waiting","run":"' .. id) ~= nil
  end, 10)
  M.hold(dir, db, ("SELECT id FROM runs WHERE id = '%s' FOR UPDATE"):format(id))
  local rc, out, err = H.mend_in(nil, db, "signal " .. id .. " payment --data '{\"amount\":5}'")
  assert.are.equal(0, rc, out .. err)
  local ok = pcall(H.wait_for, "the log to name the lock", function()
    return S.log(dir):find("run " .. id .. " is locked by session") ~= nil
  end, 15)
  assert(ok, "the batch did not wait: " .. S.log(dir))
  return base, pid, id
end

-- Ends every session hold() started or adopt() was told of, newest first.
function M.release()
  for i = #holds, 1, -1 do
    H.sql(H.PG, ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '%s'")
      :format(holds[i]))
    holds[i] = nil
  end
end

-- For a describe's setup and teardown: while it runs, every `mend` its specs run (H.MEND) is
-- bounded by `seconds`, so that one frozen on a held lock fails its spec, never hangs the suite.
function M.bound_mend(seconds)
  local real
  return function()
    real = H.MEND
    H.MEND = ("timeout %d %s"):format(seconds, H.MEND)
  end, function() H.MEND = real end
end

-- For after_each: the sessions held released, the servers started stopped, the files removed.
function M.clean_up()
  M.release()
  S.stop_all()
  H.cleanup()
end

return M
