-- mend.cli.store: the commands that look after the store as a whole: `mend prune` (runs that
-- ended long ago removed), `mend copy` (a SQLite store into a new PostgreSQL one) and `mend db
-- upgrade` (an older SQLite file given a new one's layout). Each is one call of the Lua API,
-- which owns the SQL and the transaction; this module checks the flags and says what was done,
-- and never reads or writes the database by itself.

local mend = require "mend"
local base = require "mend.cli.base"
local render = require "mend.render"
local json = mend.json

local out, usage_error = base.out, base.usage_error
local with_engine, existing_db = base.with_engine, base.existing_db
local EXIT_OK = base.EXIT_OK
local fmt_time = render.fmt_time

local M = {}

-- Ended for good: what prune may remove (needs_attention waits for a person).
local ENDED = { "succeeded", "compensated", "failed", "resolved" }

-- A duration: 30d, 12h, 90m, 45s (or w, weeks). Seconds.
local function duration_flag(o, name)
  local v = o[name]
  local n, unit = tostring(v):match("^(%d+%.?%d*)([smhdw])$")
  if not n then
    usage_error(o._command, "--%s must be a duration like 30d, 12h, 90m or 45s, got %s", name, v)
  end
  local seconds = tonumber(n) * ({ s = 1, m = 60, h = 3600, d = 86400, w = 604800 })[unit]
  -- a run of digits too long for a double reads as infinity: no time is that long ago
  if seconds == math.huge then
    usage_error(o._command, "--%s must be a finite duration, got %s", name, v)
  end
  return seconds
end

-- Child runs that ended in time but are kept, a run above each being unfinished or a dead letter.
local function print_kept(n)
  if (n or 0) == 0 then return end
  out("  kept %d ended child run%s: a run above %s is unfinished or in the dead-letter queue\n",
      n, n == 1 and "" or "s", n == 1 and "it" or "each")
end

local function print_pruned(r)
  local parts = {}
  for _, s in ipairs(ENDED) do
    if (r.runs[s] or 0) > 0 then parts[#parts + 1] = ("%d %s"):format(r.runs[s], s) end
  end
  if r.total == 0 then
    if (r.kept or 0) == 0 then
      out("no runs ended before %s: nothing to prune\n", fmt_time(r.before))
    else
      out("no run that ended before %s may be pruned yet\n", fmt_time(r.before))
    end
    print_kept(r.kept)
    return
  end
  out("%s %d run%s that ended before %s: %s\n", r.dry_run and "would prune" or "pruned",
      r.total, r.total == 1 and "" or "s", fmt_time(r.before), table.concat(parts, ", "))
  out("  with %d step rows, %d history rows and %d dead letters%s\n", r.steps, r.history, r.dlq,
      r.dry_run and " (dry run: nothing was removed)" or "")
  print_kept(r.kept)
end

function M.prune(o)
  if not o["older-than"] then usage_error("prune", "--older-than is required (like 30d)") end
  local older = duration_flag(o, "older-than")
  base.check_status(o, ENDED, "prune takes runs that ended; their status")
  return with_engine(existing_db(o.db), function(eng)
    local r = eng:prune{ older_than = older, status = o.status, dry_run = o["dry-run"] }
    r.total = 0
    for _, n in pairs(r.runs) do r.total = r.total + n end
    r.dry_run, r.older_than = o["dry-run"] == true, older
    if o.json then out("%s\n", render.encode(r)) else print_pruned(r) end
    return EXIT_OK
  end)
end

-- mend copy: the whole store, into an empty PostgreSQL one (the counts are checked there).
local COPY_ORDER = { "runs", "steps", "history", "breakers", "dlq", "workflow_versions", "inbox",
                     "tokens", "audit" }
function M.copy(o)
  if not o.from then usage_error("copy", "--from is required (the SQLite database)") end
  if not o.to then usage_error("copy", "--to is required (postgres://...)") end
  existing_db(o.from)
  local counts = mend.copy(o.from, o.to)
  if o.json then out("%s\n", render.encode(counts)) return EXIT_OK end
  local parts = {}
  for _, t in ipairs(COPY_ORDER) do parts[#parts + 1] = ("%s %d"):format(t, counts[t] or 0) end
  out("copied %s\n", table.concat(parts, ", "))
  return EXIT_OK
end

-- mend db upgrade: the file's own layout made current (run keys: a partial index), which the
-- automatic upgrade at open leaves to a person, since older mends on the file do not survive it.
function M.db_upgrade(o)
  existing_db(o.db)
  local how = mend.upgrade_db(o.db, { despite_leases = o["despite-leases"] })
  if how == "current" then out("%s: run keys are a partial index already\n", o.db)
  else out("%s: run keys are a partial index now (the runs table was made again)\n", o.db) end
  return EXIT_OK
end

-- mend db trust: the database's sandbox mark cleared, the host's decision that the code of its
-- workflows (a sandboxed engine's among them) is trusted again; said on stderr what it means.
function M.db_trust(o)
  existing_db(o.db)
  -- called by pcall, its refusal names no line of this file (it names the Lua line that calls)
  local ok, how = pcall(mend.trust_db, o.db)
  if not ok then base.fail("%s", base.refusal("mend.trust_db", how)) end
  if how == "unmarked" then
    out("%s: not marked sandboxed: nothing to do\n", o.db)
    return EXIT_OK
  end
  out("%s: the sandbox mark is cleared\n", o.db)
  io.stderr:write("mend: engines that open it from now on run its workflows' code unsandboxed, "
                  .. "with io, os and mend.exec (workflow versions a sandboxed engine stored "
                  .. "included) unless told --sandbox; engines open now keep what they are "
                  .. "until restarted, and a sandboxed one opened again marks it again\n")
  return EXIT_OK
end

function M.db(_, sub)
  usage_error("db", sub and ("unknown db command %s"):format(sub)
                        or "give a db command: upgrade, trust")
end

return M
