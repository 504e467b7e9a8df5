-- mend.cli: the `mend` command. A client of the Lua API (docs/lua-api.md), as lua.c is of the
-- Lua library: it parses arguments, drives an engine and prints (through mend.render, which
-- the REPL shares). It never reads the database by itself and holds no workflow logic.
--
-- M.main(args) takes the arguments after the program name (args[1] is the command) and
-- returns the exit code: 0 the run succeeded, 3 it was compensated or failed, 4 it needs
-- attention, 1 mend itself failed, 2 usage error. status, history and dlq exit 0 when they
-- could answer.

local mend = require "mend"
local core = require "mend.core"   -- its _hear_stop, for a worker whose files load
local json = mend.json

local M = {}

local EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
local OUTCOME_EXIT = { succeeded = 0, compensated = 3, failed = 3, needs_attention = 4, resolved = 3 }

---------------------------------------------------------------------------------------------
-- Output and the CLI's own errors

local function out(fmt, ...) io.stdout:write(fmt:format(...)) end
local function say(fmt, ...) io.stderr:write(fmt:format(...)) end

-- Errors of the CLI itself carry this metatable; anything else raised (a load error, a
-- storage error) is the engine's and is reported as it is.
local CliError = {}

local function fail(fmt, ...)
  error(setmetatable({ code = EXIT_FAILURE, message = fmt:format(...) }, CliError), 0)
end

local function usage_error(cmd, fmt, ...)
  error(setmetatable({ code = EXIT_USAGE, command = cmd, message = fmt:format(...) }, CliError), 0)
end

local render = require "mend.render"
local pages = require "mend.pages"
local present = render.present
local fmt_time = render.fmt_time
local write_json = render.write_json
local write_list = render.write_list
local transition = render.transition
local render_event = render.render_event
local print_events = render.print_events
local print_outcome = render.print_outcome
local unfinished = render.unfinished
local due_lines = render.due_lines
local print_status = render.print_status
local print_dlq = render.print_dlq
local print_runs = render.print_runs
local breakers_now = render.breakers_now
local print_breakers = render.print_breakers

---------------------------------------------------------------------------------------------
-- Engines

-- Calls fn(eng) with a fresh engine and closes it, whatever fn does.
local function with_engine(conf, fn)
  local eng = mend.engine(conf)
  local res = table.pack(pcall(fn, eng))
  eng:close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- The read-only commands must not create a database where there was none.
local function existing_db(path)
  if path ~= ":memory:" and not path:match("^file:") and not path:match("^postgres") then
    local f = io.open(path, "rb")
    if not f then fail("no database %s", path) end
    f:close()
  end
  return { db = path }
end

-- The status of run id; an unknown run (nil from the engine) is a failure of the command, and
-- any error raised is the engine's own.
local function run_status(eng, id)
  local st = eng:status(id)
  if not st then fail("no run %s", id) end
  return st
end

---------------------------------------------------------------------------------------------
-- Commands

-- The JSON text of a flag; `@FILE` (`@-`: stdin) reads it from there: a command line holds at
-- most 128 KiB in one argument, and no JSON text begins with @.
local function json_text(flag, text)
  local file = text:match("^@(.*)$")
  if not file then return text end
  local f, err = io.stdin, nil
  if file ~= "-" then f, err = io.open(file, "rb") end
  if not f then fail("cannot read --%s %s", flag, err) end
  text = f:read("a")
  if f ~= io.stdin then f:close() end
  if not text then fail("cannot read --%s %s", flag, file) end
  return text
end

local function decode_input(text)
  if text == nil then return {} end
  text = json_text("input", text)
  local ok, v = pcall(json.decode, text)
  if not ok then fail("invalid --input JSON: %s", tostring(v)) end
  return v
end

local function check_readable(file)
  local f, err = io.open(file, "rb")
  if not f then fail("cannot open workflow %s", err) end
  f:close()
end

local function number_flag(o, name, default)
  local v = o[name]
  if v == nil then return default end
  local n = tonumber(v)
  -- 1e999 reads as infinity: no lease, poll or grace can last that long (PostgreSQL refuses
  -- such an interval only once the worker runs)
  if not n or not (n > 0 and n < math.huge) then
    usage_error(o._command, "--%s must be a finite number > 0, got %s", name, v)
  end
  return n
end

-- A count (0 when not given): 2.5 is no count, and had been read as no limit.
local function whole_flag(o, name)
  local n = number_flag(o, name, 0)
  if not math.tointeger(n) then usage_error(o._command, "--%s must be a whole number > 0, got %s", name, o[name]) end
  return math.tointeger(n)
end

-- Who does an operation, for the history: the user and host of this process.
local function who()
  local p = io.popen("id -un 2>/dev/null; hostname 2>/dev/null")
  local user, host = p and p:read("l"), p and p:read("l")
  if p then p:close() end
  return ("%s@%s (mend cli)"):format(user or os.getenv("USER") or "unknown", host or "?")
end

-- Where an alert of this process goes, for the outcome's "attention" line.
local function alert_target(o, level, eng)
  if o["alert-command"] then
    if eng:alert_commands_failed() > 0 then
      return "the --alert-command failed (see the log): it may have told nobody"
    end
    return "the alert was sent to the --alert-command"
  end
  if level == "error" then return "no alert was sent: no --alert-command, and --log-level error" end
  return "the alert went to the log only (stderr): no --alert-command was given"
end

-- On a terminal the timeline printed at the end shows every transition, so the live log shows
-- only what goes wrong (warn), unless --log-level asks for more: then the live log is the
-- record and the timeline is not printed again. Elsewhere the log is JSON lines on stderr.
local function run_output(o)
  local level = o["log-level"]
  if o.json or not (mend.isatty(1) and mend.isatty(2)) then return level, false end
  level = level or "warn"
  return level, level == "info" or level == "debug"
end

-- --instruction-budget N: a whole number of instructions, or nil.
local function budget_flag(o)
  if o["instruction-budget"] == nil then return nil end
  local n = math.tointeger(tonumber(o["instruction-budget"]))
  if not n or n < 1 then
    usage_error(o._command, "--instruction-budget must be a whole number >= 1, got %s",
                o["instruction-budget"])
  end
  return n
end

-- --memory-limit N: bytes, or nil; only with --sandbox.
local function memory_flag(o)
  if o["memory-limit"] == nil then return nil end
  local n = math.tointeger(tonumber(o["memory-limit"]))
  if not n or n < 1 then
    usage_error(o._command, "--memory-limit must be a whole number of bytes >= 1, got %s",
                o["memory-limit"])
  end
  if not o.sandbox then usage_error(o._command, "--memory-limit needs --sandbox") end
  return n
end

-- A page of the run's history; a run gone meanwhile (pruned) is a failure of the command.
local function history_page(eng, id, opts)
  local page, err = eng:history(id, opts)
  if not page then fail("%s", err) end
  return page
end

-- Calls each(page) with the run's rows after seq `after` up to seq `upto` (all if nil), a page
-- at a time (mend.pages); a run gone meanwhile is a failure of the command.
local function each_page(eng, id, after, upto, each)
  local last, err = pages.each(eng, id, after, upto, each)
  if not last then fail("%s", err) end
end

local function cmd_run(o, file)
  local input = decode_input(o.input)
  check_readable(file)
  local level, live = run_output(o)
  local conf = { db = o.db, clock = o.clock, seed = o.seed, durability = o.durability,
                 log = "stderr", log_level = level, alert_command = o["alert-command"],
                 instruction_budget = budget_flag(o), memory_limit = memory_flag(o),
                 sandbox = o.sandbox or nil }
  return with_engine(conf, function(eng)
    local name = eng:load(file)
    local id, existed = eng:start(name, input, { key = o.key })
    if existed then
      say("mend: run key %s names the existing run %s\n", o.key, id)
      -- Left unfinished: carried on here, or waited for while a live worker holds it (and
      -- carried on here if that worker dies meanwhile).
      local told
      while unfinished(run_status(eng, id)) do
        local how, worker = eng:resume(id)
        if how == "resumed" then
          say("mend: run %s was left unfinished and no live worker holds it; resuming it here\n", id)
          break
        end
        if not told then say("mend: run %s is held by worker %s; waiting for its end\n", id, worker) end
        told = true
        eng:wait(id, { timeout = 1 })
      end
    end
    eng:run()
    local st = run_status(eng, id)
    if o.json then
      write_json(st)
    else
      print_outcome(st, alert_target(o, level, eng))
      if live then out("(the log above is its timeline; mend history %s prints it again)\n", id)
      else
        out("timeline:\n")
        local t0
        each_page(eng, id, 0, nil, function(page)
          t0 = t0 or page[1].at
          print_events(page, 1, t0)
        end)
      end
    end
    local code = OUTCOME_EXIT[st.status]
    if not code then fail("run %s stopped unfinished (%s)", id, tostring(st.status)) end
    return code
  end)
end

local function cmd_status(o, id)
  return with_engine(existing_db(o.db), function(eng)
    local st = run_status(eng, id)
    if o.json then write_json(render.nest_branches(st)) else print_status(st, eng:now()) end
    return EXIT_OK
  end)
end

-- A whole number of a page flag, written in digits and within the API's bounds (lo to hi).
local function page_flag(o, name, lo, hi)
  local v = o[name]
  if v == nil then return nil end
  local n = v:match("^%d+$") and math.tointeger(tonumber(v))
  if n and n >= lo and n <= hi then return n end
  if hi == math.maxinteger then
    usage_error("history", "--%s must be a whole number >= %d (a seq), got %s", name, lo, v)
  end
  usage_error("history", "--%s must be a whole number from %d to %d, got %s", name, lo, hi, v)
end

-- The filter of --step S: its events, and its branches' for a group.
local function step_filter(st, step)
  local names, known = {}, false
  for _, s in ipairs(st.steps or {}) do
    names[#names + 1] = s.name
    known = known or s.name == step
  end
  if not known then
    fail("run %s has no step %s (its steps: %s)", st.id, step, table.concat(names, ", "))
  end
  local branch = step .. "/"
  return function(e) return e.step == step or (e.step and e.step:sub(1, #branch) == branch) end
end

-- Where cmd_history's rows go: printed as timeline lines or as one JSON array, a page at a
-- time. t0 is the time they are shown from (the run's first row's).
local function history_sink(o, t0)
  local sink, first = {}, true
  function sink.page(rows)
    if #rows == 0 then return end
    if not o.json then return print_events(rows, 1, t0) end
    out("%s%s", first and "[" or ",", json.encode(rows):sub(2, -2))
    first = false
  end
  function sink.close()
    if o.json then out("%s\n", first and "[]" or "]") end
  end
  return sink
end

-- The rows of --step S (its last `tail`, if given), read in pages and passed on a page at a
-- time; a tail is the only list kept, and it is at most `tail` rows.
local function step_rows(eng, id, keep, tail, sink)
  local ring, n = {}, 0
  each_page(eng, id, 0, nil, function(page)
    local rows = {}
    for _, e in ipairs(page) do
      if keep(e) then
        if tail then
          n = n + 1
          ring[(n - 1) % tail + 1] = e
        else
          rows[#rows + 1] = e
        end
      end
    end
    sink.page(rows)
  end)
  if tail then
    local rows = {}
    for i = math.max(n - tail + 1, 1), n do rows[#rows + 1] = ring[(i - 1) % tail + 1] end
    sink.page(rows)
  end
end

-- --chart: the run as the dashboard draws it (mend.chart), its rows read in pages up to the
-- last one there when it began, so that its axis holds them all.
local function print_chart(eng, st, id)
  local first = history_page(eng, id, { limit = 1 })[1]
  local last = history_page(eng, id, { tail = 1 })[1]
  local function rows(f)
    if not last then return end
    each_page(eng, id, 0, last.seq, function(page) for _, e in ipairs(page) do f(e) end end)
  end
  print_outcome(st)
  for _, line in ipairs(require("mend.chart").lines(st, rows, eng:now(), nil, first, last)) do
    out("%s\n", line)
  end
end

-- Every form of the history is read in pages (--tail, --limit: one; the rest: as many as it
-- has), so that a long run costs its pages' memory, not its whole history's.
local function cmd_history(o, id)
  if o.chart and o.json then usage_error("history", "--chart and --json draw the run two ways: give one") end
  if o.chart and o.step then usage_error("history", "--chart draws every step: give it without --step") end
  local most = mend.history_page_max
  local tail = page_flag(o, "tail", 1, most)
  local limit = page_flag(o, "limit", 1, most)
  local after = page_flag(o, "after", 0, math.maxinteger)
  if tail and (after or limit) then
    usage_error("history", "--tail is the last events; --after and --limit page from the first: give one")
  end
  if (after or limit) and (o.step or o.chart) then
    usage_error("history", "--after and --limit page the whole history: give them without --%s",
                o.step and "step" or "chart")
  end
  return with_engine(existing_db(o.db), function(eng)
    local st = run_status(eng, id)
    if o.chart then
      print_chart(eng, st, id)
      return EXIT_OK
    end
    local keep = o.step and step_filter(st, o.step)   -- refused before anything is printed
    local first = history_page(eng, id, { limit = 1 })[1]
    if not o.json then
      print_outcome(st)
      out("timeline:\n")
    end
    local sink = history_sink(o, first and first.at)
    if keep then step_rows(eng, id, keep, tail, sink)
    elseif tail then sink.page(history_page(eng, id, { tail = tail }))
    elseif limit then sink.page(history_page(eng, id, { after = after or 0, limit = limit }))
    else each_page(eng, id, after or 0, nil, sink.page) end
    sink.close()
    return EXIT_OK
  end)
end

-- --since takes seconds ago ("90", "15m", "2h", "7d") or a time since the epoch.
local function parse_since(o)
  if o.since == nil then return nil end
  local n, unit = o.since:match("^(%d+%.?%d*)([smhd]?)$")
  n = tonumber(n)
  if not n then usage_error(o._command, "--since must be like 90, 15m, 2h or 7d, got %s", o.since) end
  if unit == "" and n > 1e9 then return n end   -- already a time
  local scale = ({ [""] = 1, s = 1, m = 60, h = 3600, d = 86400 })[unit]
  return os.time() - n * scale
end

local RUN_STATUSES = { "running", "compensating", "succeeded", "compensated", "failed",
                       "needs_attention", "resolved" }
-- Ended for good: what prune may remove (needs_attention waits for a person).
local ENDED = { "succeeded", "compensated", "failed", "resolved" }

local function check_status(o, allowed, what)
  if o.status == nil then return end
  for _, s in ipairs(allowed) do
    if s == o.status then return end
  end
  usage_error(o._command, "--status %s: %s is one of %s", o.status, what, table.concat(allowed, ", "))
end

local function cmd_runs(o)
  check_status(o, RUN_STATUSES, "a run's status")
  local limit = o.limit and math.tointeger(tonumber(o.limit))
  if o.limit and not (limit and limit > 0) then usage_error("runs", "--limit must be a positive integer") end
  return with_engine(existing_db(o.db), function(eng)
    local runs = eng:runs{ status = o.status, workflow = o.workflow, since = parse_since(o),
                           attention = o.attention, limit = limit or 50 }
    if o.json then write_list(runs) else print_runs(runs) end
    return EXIT_OK
  end)
end

-- A duration: 30d, 12h, 90m, 45s (or w, weeks). Seconds.
local function duration_flag(o, name)
  local v = o[name]
  local n, unit = tostring(v):match("^(%d+%.?%d*)([smhdw])$")
  if not n then
    usage_error(o._command, "--%s must be a duration like 30d, 12h, 90m or 45s, got %s", name, v)
  end
  return tonumber(n) * ({ s = 1, m = 60, h = 3600, d = 86400, w = 604800 })[unit]
end

local function print_pruned(r)
  local parts = {}
  for _, s in ipairs(ENDED) do
    if (r.runs[s] or 0) > 0 then parts[#parts + 1] = ("%d %s"):format(r.runs[s], s) end
  end
  if r.total == 0 then
    out("no runs ended before %s: nothing to prune\n", fmt_time(r.before))
    return
  end
  out("%s %d run%s that ended before %s: %s\n", r.dry_run and "would prune" or "pruned",
      r.total, r.total == 1 and "" or "s", fmt_time(r.before), table.concat(parts, ", "))
  out("  with %d step rows, %d history rows and %d dead letters%s\n", r.steps, r.history, r.dlq,
      r.dry_run and " (dry run: nothing was removed)" or "")
end

local function cmd_prune(o)
  if not o["older-than"] then usage_error("prune", "--older-than is required (like 30d)") end
  local older = duration_flag(o, "older-than")
  check_status(o, ENDED, "prune takes runs that ended; their status")
  return with_engine(existing_db(o.db), function(eng)
    local r = eng:prune{ older_than = older, status = o.status, dry_run = o["dry-run"] }
    r.total = 0
    for _, n in pairs(r.runs) do r.total = r.total + n end
    r.dry_run, r.older_than = o["dry-run"] == true, older
    if o.json then out("%s\n", json.encode(r)) else print_pruned(r) end
    return EXIT_OK
  end)
end

-- Calls an engine operation; its refusal ("dlq retry: run ... is ...") becomes mend's error.
local function operate(prefix, method, eng, ...)
  local res = table.pack(pcall(method, eng, ...))
  if not res[1] then fail("%s", (tostring(res[2]):gsub("^" .. prefix .. ": ", ""))) end
  return table.unpack(res, 2, res.n)
end

local function cmd_breakers(o, op, key)
  if op == nil then
    return with_engine(existing_db(o.db), function(eng)
      local list = breakers_now(eng:breakers(), eng:now())
      if o.json then write_list(list) else print_breakers(list, eng:now()) end
      return EXIT_OK
    end)
  end
  if not ({ reset = true, open = true, close = true })[op] then
    usage_error("breakers", "unknown breaker operation %s (reset, open or close)", op)
  end
  if key == nil then usage_error("breakers", "missing KEY") end
  return with_engine(existing_db(o.db), function(eng)
    operate("breakers " .. op, eng.breaker, eng, key, op,
            { seconds = o["for"] and number_flag(o, "for"), who = who() })
    out("breaker %s: %s\n", key, op == "open" and "opened" or op == "close" and "closed" or "reset")
    return EXIT_OK
  end)
end

-- Loads the workflow version a stored run started with, so that this process can act on the
-- run: from the script the store keeps for it, from any directory; for a run from before
-- stores kept scripts, from the file it came from.
local function load_run_workflow(eng, id)
  local st = run_status(eng, id)
  if not st.source or st.source:match("^=?register$") then
    fail("run %s came from a workflow registered in code; repair it from that program", id)
  end
  local ok, err = pcall(eng.load_version, eng, st.workflow, st.version)
  if ok then return st end
  local f = io.open(st.source, "rb")
  if not f then
    fail("cannot load the workflow of run %s: %s; and %s cannot be opened from here",
         id, tostring(err):gsub("^.-: ", "", 1), st.source)
  end
  f:close()
  eng:load(st.source)
  return st
end

-- Runs fn(eng) in an engine that has loaded the workflow the run came from, so that a repair
-- can carry the run on here. `optional`: go on without it (the engine says what it can do).
local function with_run_engine(o, id, fn, optional)
  local conf = existing_db(o.db)
  conf.log = "stderr"
  return with_engine(conf, function(eng)
    if optional then pcall(load_run_workflow, eng, id) else load_run_workflow(eng, id) end
    return fn(eng)
  end)
end

local function cmd_dlq_retry(o, id)
  return with_run_engine(o, id, function(eng)
    operate("dlq retry", eng.dlq_retry, eng, id, { who = who() })
    if o.detach then
      out("run %s is back in the queue; a worker will resume it\n", id)
      return EXIT_OK
    end
    eng:run()
    local st = run_status(eng, id)
    print_outcome(st)
    return OUTCOME_EXIT[st.status] or EXIT_FAILURE
  end)
end

local function cmd_dlq_resolve(o, id)
  if not o.note then usage_error("dlq resolve", "--note TEXT is required: say what was done") end
  return with_engine(existing_db(o.db), function(eng)
    operate("dlq resolve", eng.resolve, eng, id, { note = o.note, who = who() })
    out("run %s resolved\n", id)
    return EXIT_OK
  end)
end

local function print_workflows(list)
  if #list == 0 then
    out("no workflow versions recorded yet (a version is recorded with its first run)\n")
    return
  end
  out("%-18s  %-16s  %-27s  %-10s  %s\n", "WORKFLOW", "VERSION", "FIRST SEEN", "UNFINISHED", "SOURCE")
  local newest = {}
  for _, v in ipairs(list) do
    local sources = {}
    for _, src in ipairs(type(v.sources) == "table" and v.sources or {}) do
      if present(src) then sources[#sources + 1] = src end
    end
    local notes = {}
    if not newest[v.workflow] then newest[v.workflow] = true; notes[#notes + 1] = "newest" end
    if (v.unavailable or 0) > 0 then notes[#notes + 1] = v.unavailable .. " cannot progress" end
    if v.kept ~= true then notes[#notes + 1] = "no script kept" end
    out("%s  %-16s  %-27s  %-10d  %s%s\n", render.cell(v.workflow, 18), v.version or "-",
        fmt_time(v.first_seen), v.unfinished or 0, table.concat(sources, ", "),
        #notes > 0 and ("  (" .. table.concat(notes, ", ") .. ")") or "")
  end
end

local function cmd_workflows(o)
  return with_engine(existing_db(o.db), function(eng)
    local list = eng:workflows(o.workflow)
    if o.json then write_list(list) else print_workflows(list) end
    return EXIT_OK
  end)
end

-- mend copy: the whole store, into an empty PostgreSQL one (the counts are checked there).
local COPY_ORDER = { "runs", "steps", "history", "breakers", "dlq", "workflow_versions", "inbox",
                     "tokens", "audit" }
local function cmd_copy(o)
  if not o.from then usage_error("copy", "--from is required (the SQLite database)") end
  if not o.to then usage_error("copy", "--to is required (postgres://...)") end
  existing_db(o.from)
  local counts = mend.copy(o.from, o.to)
  if o.json then out("%s\n", json.encode(counts)) return EXIT_OK end
  local parts = {}
  for _, t in ipairs(COPY_ORDER) do parts[#parts + 1] = ("%s %d"):format(t, counts[t] or 0) end
  out("copied %s\n", table.concat(parts, ", "))
  return EXIT_OK
end

-- mend db upgrade: the file's own layout made current (run keys: a partial index), which the
-- automatic upgrade at open leaves to a person, since older mends on the file do not survive it.
local function cmd_db_upgrade(o)
  existing_db(o.db)
  local how = mend.upgrade_db(o.db, { despite_leases = o["despite-leases"] })
  if how == "current" then out("%s: run keys are a partial index already\n", o.db)
  else out("%s: run keys are a partial index now (the runs table was made again)\n", o.db) end
  return EXIT_OK
end

local function cmd_db(_, sub)
  usage_error("db", sub and ("unknown db command %s"):format(sub) or "give a db command: upgrade")
end

-- The version `mend upgrade` moves runs to: the one the file given has (loading it here
-- records it with the runs it takes), the one --to names (a prefix is enough), or the newest
-- the store knows.
local function upgrade_target(o, eng, name)
  if o.file then
    check_readable(o.file)
    local loaded = eng:load(o.file)
    if loaded ~= name then fail("%s defines workflow %s, not %s", o.file, loaded, name) end
    local v = eng:loaded_version(name)
    if o.to and v:sub(1, #o.to) ~= o.to then fail("%s is version %s, not %s", o.file, v, o.to) end
    return v
  end
  local versions = eng:workflows(name)
  if #versions == 0 then fail("the store knows no version of workflow %s", name) end
  if not o.to then return versions[1].version end
  local found = {}
  for _, v in ipairs(versions) do
    if present(v.version) and v.version:sub(1, #o.to) == o.to then found[#found + 1] = v.version end
  end
  if #found == 0 then fail("workflow %s has no version %s (mend workflows lists them)", name, o.to) end
  if #found > 1 then fail("version %s of %s is ambiguous: %s", o.to, name, table.concat(found, ", ")) end
  return found[1]
end

local function cmd_upgrade(o, id)
  if (id == nil) == (o.workflow == nil) then
    usage_error("upgrade", "give either a RUN or --workflow W")
  end
  return with_engine(existing_db(o.db), function(eng)
    local runs, name = {}, o.workflow
    if id then
      local st = run_status(eng, id)
      runs[1], name = st, st.workflow
    else
      for _, status in ipairs{ "running", "compensating" } do
        for _, r in ipairs(eng:runs{ status = status, workflow = name }) do runs[#runs + 1] = r end
      end
    end
    local target = upgrade_target(o, eng, name)
    local refused = 0
    for _, r in ipairs(runs) do
      local ok, how = pcall(eng.upgrade, eng, r.id, target, { who = who() })
      if id and not ok then fail("%s", (tostring(how):gsub("^upgrade: ", ""))) end
      if not ok then
        refused = refused + 1
        say("mend: %s\n", (tostring(how):gsub("^upgrade: ", "")))
      elseif how == "already" then
        out("run %s is on version %s already%s\n", r.id, target, o.file and "" or
            " (the newest this database knows of; --file PATH moves it to a file's version)")
      else
        out("run %s: version %s -> %s\n", r.id, present(r.version) and r.version or "?", target)
      end
    end
    if not id then
      out("%d unfinished run%s of %s, %d refused\n", #runs, #runs == 1 and "" or "s", name, refused)
    end
    return refused > 0 and EXIT_FAILURE or EXIT_OK
  end)
end

local function cmd_cancel(o, id)
  return with_run_engine(o, id, function(eng)
    local how, why = operate("cancel", eng.cancel, eng, id, { who = who() })
    if how == "requested" then
      local st = run_status(eng, id)
      out("run %s is held by a live worker (%s); it was asked to cancel (within a second)\n", id,
          present(st.held_by) and st.held_by or "?")
      return EXIT_OK
    elseif how == "recorded" then
      out("run %s is held by no live worker and cannot be carried on here (%s); the cancel is"
          .. " recorded: the worker that next takes the run cancels it\n", id, why or "?")
      return EXIT_OK
    end
    -- going back, it first waits for its child's undoing; a child in the dead-letter queue waits
    -- for a person, and this process would wait with it for ever
    local st = run_status(eng, id)
    for _, c in ipairs(st.children or {}) do
      if c.status == "needs_attention" then
        print_outcome(st)
        out("run %s waits for its child run %s, in the dead-letter queue, to be undone: repair"
            .. " it (mend dlq retry %s, or resolve it); a worker carries the run on then\n",
            id, c.run_id, c.run_id)
        return EXIT_OK
      end
    end
    eng:run()
    print_outcome(run_status(eng, id))
    return EXIT_OK
  end, true)
end

local function cmd_signal(o, first, second)
  local id, name = first, second
  if o["run-key"] then
    if second ~= nil then usage_error("signal", "give RUN or --run-key, not both") end
    id, name = nil, first
  elseif second == nil then
    usage_error("signal", "missing NAME")
  end
  local data = nil
  if o.data then
    local ok, v = pcall(json.decode, json_text("data", o.data))
    if not ok then fail("--data is not JSON: %s", tostring(v)) end
    data = v
  end
  return with_engine(existing_db(o.db), function(eng)
    local how, run = operate("signal", eng.signal, eng, id, name, data,
                             { key = o.key, run_key = o["run-key"] })
    if how == "duplicate" then
      out("run %s has event %s with key %s already: nothing sent\n", run, name, o.key)
    else
      out("event %s sent to run %s\n", name, run)
    end
    return EXIT_OK
  end)
end

local function cmd_complete(o, token)
  local result = nil
  if o.result then
    local ok, v = pcall(json.decode, json_text("result", o.result))
    if not ok then fail("--result is not JSON: %s", tostring(v)) end
    result = v
  end
  return with_engine(existing_db(o.db), function(eng)
    local run = operate("complete", eng.complete, eng, token, result)
    out("token completed: run %s goes on\n", run)
    return EXIT_OK
  end)
end

local function cmd_fail(o, token)
  if not o.kind then usage_error("fail", "missing --kind (retryable, fatal or compensable)") end
  return with_engine(existing_db(o.db), function(eng)
    local run = operate("fail", eng.fail, eng, token, { kind = o.kind, message = o.message })
    out("token failed (%s): run %s handles it\n", o.kind, run)
    return EXIT_OK
  end)
end

local function cmd_dlq(o)
  return with_engine(existing_db(o.db), function(eng)
    local entries = eng:dlq()
    if o.json then write_list(entries) else print_dlq(entries) end
    return EXIT_OK
  end)
end

-- The workflow files of a directory, sorted, so that a worker loads them in a stable order.
local function workflow_files(dir)
  local ok, names, regular = pcall(mend.listdir, dir)
  -- called by pcall, a C function: the message has no position to strip, only "path: reason"
  if not ok then
    fail("cannot read the workflows directory %s (a worker loads every .lua file of one)", names)
  end
  local files = {}
  for _, name in ipairs(names) do
    -- a named pipe's opening would block the worker until a writer came, deaf to SIGTERM
    if name:match("%.lua$") and regular[name] then files[#files + 1] = dir .. "/" .. name end
  end
  table.sort(files)
  return files
end


-- Loads the files of the workflows directory that are new or changed since it last looked. One
-- that does not load is logged and alerted once per text, and the others are served: a broken
-- file must not take every workflow down. Looked at again every few seconds while serving, so
-- that a file fixed (or added) is taken up without a restart. A file's top level may take
-- seconds (up to its load limit): a SIGINT or SIGTERM meanwhile stops it, and nothing more loads
-- (the worker stops).
local function workflow_loader(eng, dir)
  local seen, unreadable = {}, nil
  local function load_new(first)
    local ok, files = pcall(workflow_files, dir)
    if not ok then
      if first then error(files, 0) end
      -- said once, not at every look: the workflows loaded before go on being served
      local why = type(files) == "table" and files.message or tostring(files)
      if unreadable ~= why then
        unreadable = why
        eng:log("warn", "workflow", why .. ": serving the workflows loaded before")
      end
      return
    end
    if unreadable then
      unreadable = nil
      eng:log("info", "workflow", "the workflows directory " .. dir .. " can be read again")
    end
    for _, file in ipairs(files) do
      if core._hear_stop() then return end
      local f = io.open(file, "rb")
      local text = f and f:read("a")
      if f then f:close() end
      if text and text ~= seen[file] then
        seen[file] = text
        local loaded, err = pcall(eng.load, eng, file)
        local stop = not loaded and core._hear_stop()
        if loaded then
          if not first then eng:log("info", "workflow", "loaded " .. file .. " (" .. err .. ")") end
        elseif stop then
          seen[file] = nil
          eng:log("info", "worker", stop .. ": stopped loading " .. file)
          return
        else
          err = tostring(err)
          eng:log("error", "workflow", err)
          eng:alert{ kind = "workflow_load_failed", file = file, error = err }
        end
      end
    end
  end
  -- Until serve's loop listens for them, and while its tick loads, the signals are heard here;
  -- one heard in a tick goes on to the loop then (mend_limits_hear_stop).
  return function(first)
    core._hear_stop(true)
    local ok, err = pcall(load_new, first)
    core._hear_stop(false)
    if not ok then error(err, 0) end
  end
end

-- The HTTP API on the engine's loop (mend.listen), for `mend serve` and `mend worker --listen`:
-- its flags are checked before the engine opens the database.
local LISTEN_CLI = { fail = fail, usage_error = usage_error, out = out }
local function listen_options(o) return require("mend.listen").options(o, LISTEN_CLI) end
local function with_listener(eng, opts, fn)
  return require("mend.listen").with_listener(eng, opts, fn, LISTEN_CLI)
end

local function cmd_worker(o)
  local conf = { db = o.db, durability = o.durability, log = "stderr",
                 log_level = o["log-level"], alert_command = o["alert-command"],
                 instruction_budget = budget_flag(o), memory_limit = memory_flag(o),
                 sandbox = o.sandbox or nil,
                 lease = number_flag(o, "lease", 30), grace = number_flag(o, "grace", 10),
                 clock = o.clock, park_after = 1,
                 buffered_print = true }   -- a workflow's print never blocks the worker
  if o["park-after"] then   -- 0: never (to the engine, < 0; its 0 is the default)
    local n = tonumber(o["park-after"])
    if not n or not (n >= 0 and n < math.huge) then
      usage_error(o._command, "--park-after must be a finite number >= 0, got %s", o["park-after"])
    end
    conf.park_after = n > 0 and n or -1
  end
  -- every flag is checked before anything is opened or loaded
  local serving = { poll = number_flag(o, "poll", 0.1), max_in_flight = whole_flag(o, "max-in-flight"),
                    every = 2 }
  local files = workflow_files(o.workflows or "workflows")
  if #files == 0 then fail("no workflow files (*.lua) in %s", o.workflows or "workflows") end
  local listen = o.listen and listen_options(o)
  return with_engine(conf, function(eng)
    local load_new = workflow_loader(eng, o.workflows or "workflows")
    load_new(true)
    local stop = core._hear_stop()
    if stop then
      eng:log("info", "worker", stop .. " as the workflow files loaded: stopped before serving")
      return EXIT_OK
    end
    local function work()
      serving.tick = load_new
      eng:serve(serving)
    end
    if listen then with_listener(eng, listen, work) else work() end
    return EXIT_OK
  end)
end

-- mend serve: the HTTP API alone. Runs it starts are left for workers; a dead letter retried
-- or a run cancelled through it is carried on here, as `mend dlq retry` does.
local function cmd_serve(o)
  local conf = { db = o.db, durability = o.durability, log = "stderr", log_level = o["log-level"] }
  local listen = listen_options(o)
  return with_engine(conf, function(eng)
    local dir = o.workflows or "workflows"
    local ok, files = pcall(workflow_files, dir)
    if not ok and o.workflows then error(files, 0) end
    if ok and #files > 0 then workflow_loader(eng, dir)(true) end
    return with_listener(eng, listen, function(srv)
      srv:run()
      return EXIT_OK
    end)
  end)
end

-- WORKFLOW names a workflow NAME found as DIR/NAME.lua, or a file. A bare name (no "/", no
-- ".lua") is a name first when DIR/NAME.lua is there: a script or a folder called as the
-- workflow where the command runs (a service's code beside it) is no workflow file; `./NAME`
-- names such a file. A folder opens as a file would, and is no workflow file either.
local function workflow_file(o, workflow)
  local dir = o.workflows or "workflows"
  if not workflow:find("/", 1, true) and not workflow:find("%.lua$") and #workflow <= 512 then
    local named = io.open(dir .. "/" .. workflow .. ".lua", "rb")
    if named then
      named:close()
      return dir .. "/" .. workflow .. ".lua"
    end
  end
  local f = io.open(workflow, "rb")
  if f then
    local _, unreadable = f:read(0)
    f:close()
    if not unreadable then return workflow end
  end
  -- MEND_NAME_MAX of mend.h: no workflow has a longer name.
  if #workflow > 512 then
    fail("no workflow file %s, and a workflow name of %d bytes, over the longest name of 512 bytes",
         workflow:sub(1, 64) .. "...", #workflow)
  end
  local path = dir .. "/" .. workflow .. ".lua"
  f = io.open(path, "rb")
  if not f then return nil, path end
  f:close()
  return path
end

-- A workflow NAME of no file DIR/NAME.lua: the file that declares it under another file name,
-- as a worker serving DIR would find it (each file of DIR loaded; a file that fails is named).
local function load_named(eng, o, workflow, path)
  local dir = o.workflows or "workflows"
  local ok, files = pcall(workflow_files, dir)
  if not ok then fail("no workflow file %s, and no %s", workflow, path) end
  local broken = {}
  for _, file in ipairs(files) do
    local loaded, name = pcall(eng.load, eng, file)
    if loaded and name == workflow then return name end
    if not loaded then broken[#broken + 1] = tostring(name) end
  end
  fail("no workflow file %s, and no %s, nor a file in %s that declares workflow %s%s", workflow,
       path, dir, workflow, #broken > 0 and ("; these failed to load and may: " ..
       table.concat(broken, "; ")) or "")
end

local function cmd_start(o, workflow)
  local input = decode_input(o.input)
  local file, path = workflow_file(o, workflow)
  return with_engine({ db = o.db, durability = o.durability }, function(eng)
    local name = file and eng:load(file) or load_named(eng, o, workflow, path)
    local id, existed = eng:start(name, input, { key = o.key, detached = true })
    -- stdout holds the id alone, for scripts; a key that was used before is told on stderr (a
    -- key of another workflow's run is refused by eng:start, exit 1)
    if existed then
      say("mend: run key %s names the existing run %s, a run of workflow %s\n", o.key, id, name)
    end
    out("%s\n", id)
    return EXIT_OK
  end)
end

local function cmd_wait(o, id)
  local timeout = o.timeout and number_flag(o, "timeout", nil)   -- a usage error before any look
  return with_engine(existing_db(o.db), function(eng)
    local st = run_status(eng, id)
    if unfinished(st) and not present(st.held_by) then
      local due = due_lines(st, eng:now())
      say("mend: run %s is waiting for a worker: no live worker holds it (start one: mend worker"
          .. " --db %s)%s\n", id, render.db_shown(o.db), #due > 0 and ("; " .. table.concat(due, "; ")) or "")
    end
    local st = eng:wait(id, { timeout = timeout })
    if not st then fail("run %s did not finish within %ss", id, o.timeout) end
    if o.json then write_json(st) else print_outcome(st) end
    return OUTCOME_EXIT[st.status]
  end)
end

local function cmd_repl(o)
  return require("mend.repl").main{ db = o.db, clock = o.clock or "virtual", seed = o.seed }
end

local DB_HELP = "  --db PATH        the database (default mend.db)\n"
local LOG_LEVELS = { debug = true, info = true, warn = true, error = true }
local LOG_LEVEL_HELP =
  "  --log-level L    the least level logged to stderr: debug, info (default: every\n" ..
  "                   transition), warn (failures, retries, lost leases) or error\n"
local BUDGET_HELP =
  "  --instruction-budget N  Lua instructions one attempt may run (default: no budget); over\n" ..
  "                   it the attempt fails, not retried, and the worker goes on\n"
local ALERT_HELP =
  "  --alert-command CMD  run with sh -c for each alert (a run in the dead-letter queue),\n" ..
  "                   the alert as one line of JSON on its stdin; without it alerts are\n" ..
  "                   only logged\n"

-- Each command: its positional arguments, its flags ("value" takes one, "switch" does not),
-- checks of flag values, its usage and help text, and the function that does it.
local commands = {
  run = {
    args = { "FILE" },
    flags = { input = "value", db = "value", key = "value", clock = "value", seed = "value",
              durability = "value", json = "switch", ["log-level"] = "value",
              ["alert-command"] = "value", ["instruction-budget"] = "value",
              sandbox = "switch", ["memory-limit"] = "value" },
    choices = { clock = { virtual = true, real = true },
                durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS },
    usage = "mend run FILE [--input JSON] [--db PATH] [--key K] [--clock virtual|real]\n" ..
            "                [--seed N] [--durability full|process] [--json]\n" ..
            "                [--log-level debug|info|warn|error] [--alert-command CMD]\n" ..
            "                [--instruction-budget N] [--sandbox [--memory-limit N]]",
    help = "Runs one execution of the workflow in FILE to its end, then prints the outcome and\n" ..
           "a timeline of every transition (or, with --json, the run's status as JSON). The\n" ..
           "log goes to stderr: JSON lines, or, on a terminal, readable lines of what went\n" ..
           "wrong (--log-level info shows every transition live, and the timeline is not\n" ..
           "printed again).\n\n" ..
           "  --input JSON     the run's input (default {}); @FILE reads it from FILE, @- from\n" ..
           "                   stdin\n" .. DB_HELP ..
           "  --key K          run key: a key that already names a run gives that run again\n" ..
           "  --clock C        virtual (timers fire at once, in order) or real (default)\n" ..
           "  --seed N         seed of the backoff jitter generator (default random)\n" ..
           "  --durability D   full (default: survives power loss) or process\n" ..
           "  --json           print the status object as JSON\n" .. LOG_LEVEL_HELP ..
           ALERT_HELP .. BUDGET_HELP ..
           "  --sandbox        run the workflow's code in a Lua state of its own, sandboxed as\n" ..
           "                   mend_engine_new's (README: Limits and sandbox), its allocations\n" ..
           "                   and C work charged to --instruction-budget\n" ..
           "  --memory-limit N bytes the workflow's code may hold (with --sandbox)\n\n" ..
           "Exit codes: 0 succeeded, 3 compensated or failed (or, with --key, a run a person\n" ..
           "resolved), 4 needs attention (dead-letter queue), 1 mend failed (load, storage or\n" ..
           "input error), 2 usage error.\n",
    action = cmd_run,
  },
  status = {
    args = { "RUN" },
    flags = { db = "value", json = "switch" },
    usage = "mend status RUN [--db PATH] [--json]",
    help = "Shows a run: its status, input, error and each step's status and attempts.\n\n" ..
           DB_HELP .. "  --json           print the status object as JSON\n",
    action = cmd_status,
  },
  history = {
    args = { "RUN" },
    flags = { db = "value", json = "switch", step = "value", tail = "value", chart = "switch",
              after = "value", limit = "value" },
    usage = "mend history RUN [--step S] [--tail N | --after SEQ --limit N] [--db PATH] [--json | --chart]",
    help = "Shows a run's audit trail: every transition with its time, attempt, delay and\n" ..
           "error (times from the run's start).\n\n" .. DB_HELP ..
           "  --step S         only the events of step S (and of its branches, for a group)\n" ..
           "  --tail N         only the last N events (of step S, with --step)\n" ..
           "  --after SEQ      only the events after number SEQ (each event's seq, in --json)\n" ..
           "  --limit N        at most N events; the next page is --after the last one's seq\n" ..
           "  --json           print the history as a JSON array\n" ..
           "  --chart          draw the run's timeline instead: a lane per step, a mark for\n" ..
           "                   each attempt and wait (the dashboard's picture, in text)\n",
    action = cmd_history,
  },
  worker = {
    args = {},
    flags = { db = "value", workflows = "value", lease = "value", poll = "value",
              grace = "value", ["max-in-flight"] = "value", durability = "value",
              ["log-level"] = "value", ["alert-command"] = "value",
              ["instruction-budget"] = "value", ["park-after"] = "value", clock = "value",
              sandbox = "switch", ["memory-limit"] = "value", listen = "value",
              ["token-file"] = "value", ["max-body"] = "value", cors = "value" },
    choices = { durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS,
                clock = { virtual = true, real = true } },
    usage = "mend worker [--db PATH] [--workflows DIR] [--lease S] [--poll S] [--grace S]\n" ..
            "                   [--max-in-flight N] [--durability full|process]\n" ..
            "                   [--park-after S] [--clock virtual|real]\n" ..
            "                   [--log-level debug|info|warn|error] [--alert-command CMD]\n" ..
            "                   [--instruction-budget N] [--sandbox [--memory-limit N]]\n" ..
            "                   [--listen HOST:PORT [--token-file F]]",
    help = "Executes runs until stopped. On start it resumes every unfinished run that no live\n" ..
           "worker holds, from the database alone; then it takes new runs as `mend start`\n" ..
           "records them. Several workers may share one database: each run is executed by one\n" ..
           "worker at a time, through a lease renewed while it works. SIGINT or SIGTERM: no new\n" ..
           "attempts, attempts in flight may finish within the grace period, leases are given\n" ..
           "back, exit 0.\n\n" .. DB_HELP ..
           "  --workflows DIR  load every *.lua file there (default workflows); a file that\n" ..
           "                   does not load is logged and alerted, the others are served,\n" ..
           "                   and the directory is looked at again every 2 s\n" ..
           "  --lease S        how long a run stays this worker's without renewal (default 30)\n" ..
           "  --poll S         how often to look for new runs (default 0.1)\n" ..
           "  --grace S        how long a stopping worker waits for attempts (default 10)\n" ..
           "  --max-in-flight N  runs held at once (default: no limit)\n" ..
           "  --park-after S   a run that has waited S seconds for an event or a due time\n" ..
           "                   leaves memory until it comes (default 1; 0: never); parked\n" ..
           "                   runs count in no limit, and --log-level debug names each\n" ..
           "  --clock C        real (default) or virtual: due times come at once, in order\n" ..
           "                   (for trying a workflow's long waits)\n" ..
           "  --durability D   full (default: survives power loss) or process (survives a\n" ..
           "                   crash of mend; the last commits may be lost on power loss)\n" ..
           LOG_LEVEL_HELP .. ALERT_HELP .. BUDGET_HELP ..
           "  --sandbox        run the workflows' code in a Lua state of its own, sandboxed as\n" ..
           "                   mend_engine_new's (README: Limits and sandbox), its allocations\n" ..
           "                   and C work charged to --instruction-budget; a run whose code\n" ..
           "                   meets a limit is a dead letter and the worker goes on\n" ..
           "  --memory-limit N bytes the workflows' code may hold (with --sandbox)\n" ..
           "  --listen HOST:PORT  also serve the HTTP API there; --token-file, --max-body and\n" ..
           "                   --cors as for mend serve (see mend serve --help)\n",
    action = cmd_worker,
  },
  serve = {
    args = {},
    flags = { db = "value", workflows = "value", listen = "value", ["token-file"] = "value",
              ["max-body"] = "value", cors = "value", durability = "value", ["log-level"] = "value" },
    choices = { durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS },
    usage = "mend serve [--db PATH] [--listen HOST:PORT] [--token-file F] [--workflows DIR]\n" ..
            "                  [--max-body BYTES] [--cors ORIGIN]",
    help = "Serves the JSON API under /api/v1 and /metrics (docs/http-api.md) until SIGINT or\n" ..
           "SIGTERM; prints 'mend: serving http://HOST:PORT/api/v1' once it listens. Runs it\n" ..
           "starts are left for workers (mend worker, which takes --listen too).\n\n" .. DB_HELP ..
           "  --listen HOST:PORT  where to listen (default 127.0.0.1:7070; port 0: any free one).\n" ..
           "                   An address other than loopback needs --token-file\n" ..
           "  --token-file F   a file holding a token (16 characters or more): every changing\n" ..
           "                   request needs Authorization: Bearer TOKEN, and beyond loopback\n" ..
           "                   every request does. Operations are recorded with who sent them\n" ..
           "  --workflows DIR  workflow files to start runs of (default workflows, if there);\n" ..
           "                   else the newest version the database keeps\n" ..
           "  --max-body BYTES the largest request body (default 1048576; larger: 413)\n" ..
           "  --cors ORIGIN    answer browsers from ORIGIN (default: no CORS headers)\n",
    action = cmd_serve,
  },
  start = {
    args = { "WORKFLOW" },
    flags = { db = "value", input = "value", key = "value", workflows = "value",
              durability = "value" },
    choices = { durability = { full = true, process = true } },
    usage = "mend start WORKFLOW [--input JSON] [--key K] [--db PATH] [--workflows DIR]",
    help = "Records a new run for a worker to execute and prints its id at once. WORKFLOW is a\n" ..
           "name looked up as DIR/NAME.lua, or a file (./NAME for one named as a workflow).\n" ..
           "With a run key that was used before,\n" ..
           "prints that run's id and records nothing.\n\n" ..
           "  --input JSON     the run's input (default {}); @FILE reads it from FILE, @- from\n" ..
           "                   stdin\n" ..
           "  --key K          run key (idempotency of the start)\n" .. DB_HELP ..
           "  --workflows DIR  where to look WORKFLOW up by name (default workflows)\n",
    action = cmd_start,
  },
  wait = {
    args = { "RUN" },
    flags = { db = "value", timeout = "value", json = "switch" },
    usage = "mend wait RUN [--db PATH] [--timeout S] [--json]",
    help = "Blocks until the run ends and exits with its outcome: 0 succeeded, 3 compensated,\n" ..
           "failed or resolved by a person, 4 needs attention; 1 if --timeout passed first.\n\n" ..
           DB_HELP ..
           "  --timeout S      give up after S seconds\n" ..
           "  --json           print the final status as JSON\n",
    action = cmd_wait,
  },
  dlq = {
    args = {},
    flags = { db = "value", json = "switch" },
    usage = "mend dlq [--db PATH] [--json]\n" ..
            "       mend dlq retry RUN [--detach] [--db PATH]\n" ..
            "       mend dlq resolve RUN --note TEXT [--db PATH]",
    help = "Lists the dead-letter queue: runs a machine could not settle, with the reason,\n" ..
           "the step, the age and the last error.\n\n" .. DB_HELP ..
           "  --json           print the entries as a JSON array\n\n" ..
           "'mend dlq retry RUN' and 'mend dlq resolve RUN' repair an entry: see their --help.\n",
    action = cmd_dlq,
  },
  ["dlq retry"] = {
    args = { "RUN" },
    flags = { db = "value", detach = "switch" },
    usage = "mend dlq retry RUN [--detach] [--db PATH]",
    help = "Resumes a run of the dead-letter queue where it stopped, with fresh attempts: the\n" ..
           "compensation that failed, or the step that failed with severity 3. The run then\n" ..
           "executes here to its end (the workflow file it came from is loaded), or, with\n" ..
           "--detach, is left for a worker. Recorded in the run's history with who did it.\n" ..
           "Refused for a run that is not in the queue, and for one compensated after its\n" ..
           "attempts ran out (nothing is left to resume: start a new run).\n\n" .. DB_HELP,
    action = cmd_dlq_retry,
  },
  ["dlq resolve"] = {
    args = { "RUN" },
    flags = { db = "value", note = "value" },
    usage = "mend dlq resolve RUN --note TEXT [--db PATH]",
    help = "Takes a run out of the dead-letter queue because a person settled it by hand; the\n" ..
           "run ends 'resolved' and the note is recorded in its history with who did it.\n\n" ..
           DB_HELP .. "  --note TEXT      what was done (required)\n",
    action = cmd_dlq_resolve,
  },
  cancel = {
    args = { "RUN" },
    flags = { db = "value" },
    usage = "mend cancel RUN [--db PATH]",
    help = "Cancels a running run: the attempt in flight is abandoned and the steps done are\n" ..
           "compensated in reverse. If a live worker holds the run, it is asked to, and does\n" ..
           "within a second; otherwise the compensation runs here. Refused for a run that has\n" ..
           "ended.\n\n" .. DB_HELP,
    action = cmd_cancel,
  },
  signal = {
    args = { "RUN" },
    optional = { "NAME" },
    flags = { db = "value", data = "value", key = "value", ["run-key"] = "value" },
    usage = "mend signal RUN NAME [--data JSON] [--key K] [--db PATH]\n" ..
            "       mend signal --run-key K NAME [--data JSON] [--key K] [--db PATH]",
    help = "Sends event NAME to a running run: a step `wait_for = NAME` takes it, and the data\n" ..
           "is that step's result. The event is kept in the run's inbox until a step takes it,\n" ..
           "each once, in the order sent; a worker holding the run takes it at its next poll.\n" ..
           "Refused (exit 1) for a run that has ended or does not exist.\n\n" .. DB_HELP ..
           "  --data JSON      the event's payload (default null); @FILE reads it from FILE\n" ..
           "  --key K          idempotency: the same key sent to the run again is one event\n" ..
           "  --run-key K      the run started with this run key (mend start --key), not RUN\n",
    action = cmd_signal,
  },
  complete = {
    args = { "TOKEN" },
    flags = { db = "value", result = "value" },
    usage = "mend complete TOKEN [--result JSON] [--db PATH]",
    help = "Completes the token a step handed out (ctx:token() in a step with wait = \"token\"):\n" ..
           "the step succeeds with the result and its run goes on. A token is single use and\n" ..
           "belongs to the attempt that made it: a token used already, of an earlier attempt,\n" ..
           "or of a run that ended is refused (exit 1). A worker holding the run takes it at its\n" ..
           "next poll; with no worker running, the next one does.\n\n" .. DB_HELP ..
           "  --result JSON    the step's result (default null); @FILE reads it from FILE\n",
    action = cmd_complete,
  },
  fail = {
    args = { "TOKEN" },
    flags = { db = "value", kind = "value", message = "value" },
    choices = { kind = { retryable = true, fatal = true, compensable = true } },
    usage = "mend fail TOKEN --kind retryable|fatal|compensable [--message M] [--db PATH]",
    help = "Fails the token a step handed out: the step fails as if its execute had raised\n" ..
           "that error, and its policy handles it (retryable: a new attempt, with a new token,\n" ..
           "while attempts remain; fatal or compensable: the run compensates). Refused (exit 1)\n" ..
           "as mend complete is.\n\n" .. DB_HELP ..
           "  --kind K         retryable, fatal or compensable (required)\n" ..
           "  --message M      why (recorded as the step's error)\n",
    action = cmd_fail,
  },
  workflows = {
    args = {},
    flags = { db = "value", json = "switch", workflow = "value" },
    usage = "mend workflows [--workflow W] [--db PATH] [--json]",
    help = "Lists the versions of each workflow the database knows, newest first: the version\n" ..
           "(a hash of the file's text), when it was first seen, how many of its runs are\n" ..
           "unfinished (and how many of those cannot progress), and the files it came from.\n" ..
           "A run executes the version it started with; mend upgrade moves runs on purpose.\n\n" ..
           DB_HELP ..
           "  --workflow W     only this workflow\n" ..
           "  --json           print a JSON array\n",
    action = cmd_workflows,
  },
  upgrade = {
    args = {},
    optional = { "RUN" },
    flags = { db = "value", workflow = "value", to = "value", file = "value" },
    usage = "mend upgrade RUN|--workflow W [--to VERSION] [--file PATH] [--db PATH]",
    help = "Moves an unfinished run (or every unfinished run of workflow W) to another version\n" ..
           "of its workflow: the newest the database knows, the one --to names (a prefix of it\n" ..
           "is enough), or the one in the file --file gives (recorded as a version). Refused,\n" ..
           "naming the step, when the new version does not keep the steps the run has begun\n" ..
           "(same names, same order), and for a run a live worker holds (stop it first).\n" ..
           "Recorded in the run's history with who did it. Exit 1 if any run was refused.\n\n" ..
           DB_HELP ..
           "  --workflow W     every unfinished run of this workflow\n" ..
           "  --to VERSION     the version to move to (mend workflows lists them)\n" ..
           "  --file PATH      the version in this workflow file\n",
    action = cmd_upgrade,
  },
  db = {
    args = {},
    optional = { "COMMAND" },
    flags = {},
    usage = "mend db upgrade [--db PATH] [--despite-leases]",
    help = "Changes to the database file itself: 'mend db upgrade' (see its --help).\n",
    action = cmd_db,
  },
  ["db upgrade"] = {
    args = {},
    flags = { db = "value", ["despite-leases"] = "switch" },
    usage = "mend db upgrade [--db PATH] [--despite-leases]",
    help = "Brings a SQLite file made by a mend before schema 16 to the layout a new file has:\n" ..
           "run keys (--key) unique by an index of the runs that have one, instead of a\n" ..
           "column's index with an entry for every run (a start writes less). Opening a file\n" ..
           "never does this by itself: the runs table is made again, and a mend before\n" ..
           "schema 16 still running on the file would fail every start after it. Stop every\n" ..
           "mend running on the file first: refused while a worker's lease on it lasts,\n" ..
           "naming the workers. One transaction: stopped or failed, the file is as it was.\n" ..
           "Rows, their order and keys are kept. Nothing to do on a new file or PostgreSQL.\n\n" ..
           DB_HELP ..
           "  --despite-leases upgrade while workers hold leases (every one of them must be\n" ..
           "                   a mend of schema 16 or later)\n",
    action = cmd_db_upgrade,
  },
  runs = {
    args = {},
    flags = { db = "value", json = "switch", status = "value", workflow = "value",
              since = "value", limit = "value", attention = "switch" },
    usage = "mend runs [--status S] [--workflow W] [--since T] [--limit N] [--attention]\n" ..
            "                 [--db PATH] [--json]",
    help = "Lists runs, newest first.\n\n" .. DB_HELP ..
           "  --status S       only runs in this status: running, compensating, succeeded,\n" ..
           "                   compensated, failed, needs_attention, resolved\n" ..
           "  --workflow W     only runs of this workflow\n" ..
           "  --since T        only runs created since T: 90, 15m, 2h, 7d ago, or epoch seconds\n" ..
           "  --limit N        at most N runs (default 50)\n" ..
           "  --attention      only runs flagged for attention or in the dead-letter queue\n" ..
           "  --json           print a JSON array\n",
    action = cmd_runs,
  },
  copy = {
    args = {},
    flags = { from = "value", to = "value", json = "switch" },
    usage = "mend copy --from PATH --to postgres://... [--json]",
    help = "Copies a SQLite store into a new PostgreSQL one, to move workers onto many machines:\n" ..
           "runs, steps, history, breakers, dead letters, workflow versions (with their\n" ..
           "scripts), events, completion tokens, child links and the audit, in one\n" ..
           "transaction that commits only if every count matches. Stop every worker\n" ..
           "first: refused while a worker's lease on the\n" ..
           "source lasts, and when the target already has runs. The source is only read.\n" ..
           "After the copy nobody holds a run: the workers started on PostgreSQL claim them.\n\n" ..
           "  --from PATH      the SQLite database (at this mend's schema: open it once first)\n" ..
           "  --to URI         the PostgreSQL database (a libpq URI; its schema is created)\n" ..
           "  --json           print the counts as JSON\n",
    action = cmd_copy,
  },
  prune = {
    args = {},
    flags = { db = "value", json = "switch", status = "value", ["older-than"] = "value",
              ["dry-run"] = "switch" },
    usage = "mend prune --older-than D [--status S] [--dry-run] [--db PATH] [--json]",
    help = "Removes the runs that ended more than D ago (succeeded, compensated, failed, or\n" ..
           "resolved from the dead-letter queue), with their steps, history and dead-letter\n" ..
           "rows, in one transaction, and says how many of each status it removed. Never a\n" ..
           "run that is unfinished or waits in the dead-letter queue (resolve it first). A\n" ..
           "pruned run's key (--key) and its steps' custom idempotency keys are forgotten: a\n" ..
           "new run may use them again. SQLite reuses the space; VACUUM gives it back.\n\n" ..
           "  --older-than D   ended before D ago: 30d, 12h, 90m, 45s (required)\n" ..
           "  --status S       only runs of this status: succeeded, compensated, failed, resolved\n" ..
           "  --dry-run        report what would be removed, remove nothing\n" .. DB_HELP ..
           "  --json           print the counts as JSON\n",
    action = cmd_prune,
  },
  breakers = {
    args = {},
    optional = { "OP", "KEY" },
    flags = { db = "value", json = "switch", ["for"] = "value" },
    usage = "mend breakers [--db PATH] [--json]\n" ..
            "       mend breakers reset|open|close KEY [--for S] [--db PATH]",
    help = "Lists the circuit breakers (state, counts, open until), or overrides one by hand:\n" ..
           "reset or close it (closed, counts cleared), or open it (for S seconds, default its\n" ..
           "policy's). Overrides are recorded in the audit table with who did them; workers\n" ..
           "read them within a second.\n\n" .. DB_HELP ..
           "  --for S          how long 'open' lasts\n" ..
           "  --json           print a JSON array\n",
    action = cmd_breakers,
  },
  repl = {
    args = {},
    flags = { db = "value", clock = "value", seed = "value" },
    choices = { clock = { virtual = true, real = true } },
    default_db = ":memory:",
    usage = "mend repl [--db PATH] [--clock virtual|real] [--seed N]",
    help = "An interactive Lua shell around one engine: load workflows (use), start runs, move\n" ..
           "the virtual clock with advance(seconds), break simulated services (sim) and watch\n" ..
           "the retries, breakers and compensations; help() lists what is in scope. On a\n" ..
           "terminal it has line editing, TAB completion and a history kept in ~/.mend_history\n" ..
           "($MEND_HISTFILE names another file; empty: none); otherwise it reads a script from\n" ..
           "stdin, one chunk at a time, and prints the results.\n\n" ..
           "  --db PATH        the database (default :memory:)\n" ..
           "  --clock C        virtual (default: time moves only with advance and run) or real\n" ..
           "  --seed N         seed of the backoff jitter generator (default random)\n",
    action = cmd_repl,
  },
}

local MAIN_USAGE = "mend <command> [options]"

local MAIN_HELP = "mend " .. mend.version .. [[ runs durable Lua workflows: sagas with typed
retries, backoff, circuit breakers and compensation, recorded in SQLite.

Commands:
  run FILE      run one workflow to its end and print its timeline
  worker        execute runs (and resume unfinished ones) until stopped
  serve         serve the HTTP API (/api/v1) and /metrics
  start WF      record a run for a worker and print its id
  wait RUN      block until a run ends; exit with its outcome
  status RUN    show a run and its steps
  history RUN   show a run's audit trail (--step S, --tail N)
  dlq           list the dead-letter queue; dlq retry RUN, dlq resolve RUN --note T
  runs          list runs (--status, --workflow, --since, --attention)
  breakers      list breakers; breakers reset|open|close KEY
  cancel RUN    stop a running run and compensate what it did
  signal RUN E  send event E to a run waiting for it (--data JSON, --key K, --run-key K)
  complete TOK  complete a step's token (--result JSON); fail TOK --kind K [--message M]
  workflows     list workflow versions and their unfinished runs
  upgrade RUN   move unfinished runs to another version (--workflow W, --to V, --file F)
  prune         remove runs that ended long ago (--older-than 30d, --dry-run)
  copy          copy a SQLite store into a new PostgreSQL one (--from, --to)
  db upgrade    give an older SQLite file a new one's layout (stop older mends first)
  repl          an interactive shell: use a workflow, start, advance the clock, inspect

Run 'mend <command> --help' for a command's options; 'mend --version' prints the version.

Exit codes of mend run: 0 the run succeeded, 3 it was compensated or failed, 4 it needs
attention (dead-letter queue). Of every command: 1 mend itself failed, 2 usage error;
status, history and dlq exit 0 when they could answer.
]]

---------------------------------------------------------------------------------------------
-- Arguments

local function print_help(cmd_name)
  local cmd = commands[cmd_name]
  if cmd then
    out("usage: %s\n\n%s", cmd.usage, cmd.help)
  else
    out("usage: %s\n\n%s", MAIN_USAGE, MAIN_HELP)
  end
  return EXIT_OK
end

local function check_choices(cmd_name, cmd, opts)
  for flag, allowed in pairs(cmd.choices or {}) do
    local v = opts[flag]
    if v ~= nil and not allowed[v] then
      usage_error(cmd_name, "bad value for --%s: %s", flag, v)
    end
  end
  if opts.seed ~= nil then
    local seed = math.tointeger(tonumber(opts.seed))
    if not seed then usage_error(cmd_name, "--seed must be an integer, got %s", opts.seed) end
    opts.seed = seed
  end
end

-- Parses args[first..] for command cmd_name. Returns opts and the positional arguments, or
-- nil when help was asked for.
local function parse(cmd_name, args, first)
  local cmd = commands[cmd_name]
  local opts, positional, i, rest = {}, {}, first, false
  while i <= #args do
    local a = args[i]
    if rest or a == "-" or a:sub(1, 1) ~= "-" then
      positional[#positional + 1] = a
    elseif a == "--" then
      rest = true
    elseif a == "--help" or a == "-h" then
      return nil
    else
      local name, value = a:match("^%-%-([%w_-]+)=(.*)$")
      name = name or a:match("^%-%-([%w_-]+)$")
      local kind = name and cmd.flags[name]
      if not kind then usage_error(cmd_name, "unknown flag %s", a) end
      if kind == "switch" then
        if value then usage_error(cmd_name, "--%s takes no value", name) end
        opts[name] = true
      else
        if not value then i = i + 1; value = args[i] end
        if value == nil then usage_error(cmd_name, "--%s needs a value", name) end
        opts[name] = value
      end
    end
    i = i + 1
  end
  if #positional < #cmd.args then usage_error(cmd_name, "missing %s", cmd.args[#positional + 1]) end
  local most = #cmd.args + #(cmd.optional or {})
  if #positional > most then
    usage_error(cmd_name, "unexpected argument %s", positional[most + 1])
  end
  check_choices(cmd_name, cmd, opts)
  opts.db = opts.db or cmd.default_db or "mend.db"
  opts._command = cmd_name
  return opts, positional
end

local function dispatch(args)
  local name = args[1]
  if name == nil then usage_error(nil, "no command given") end
  if name == "--help" or name == "-h" then return print_help(nil) end
  if name == "--version" then
    out("mend %s\n", mend.version)
    return EXIT_OK
  end
  if name == "help" then
    local topic = args[2]
    if topic ~= nil and not commands[topic] then usage_error(nil, "unknown command %s", topic) end
    return print_help(topic)
  end
  local first = 2
  if name == "dlq" and (args[2] == "retry" or args[2] == "resolve") then
    name, first = "dlq " .. args[2], 3
  end
  if name == "db" and args[2] == "upgrade" then name, first = "db upgrade", 3 end
  local cmd = commands[name]
  if not cmd then usage_error(nil, "unknown command %s", name) end
  local opts, positional = parse(name, args, first)
  if not opts then return print_help(name) end
  return cmd.action(opts, table.unpack(positional))
end

local function report(e)
  if getmetatable(e) == CliError then
    say("mend: %s\n", e.message)
    if e.code == EXIT_USAGE then
      local cmd = commands[e.command]
      say("usage: %s\n", cmd and cmd.usage or MAIN_USAGE)
      say("Run 'mend %s--help' for more.\n", e.command and (e.command .. " ") or "")
    end
    return e.code
  end
  local msg = type(e) == "string" and e or tostring(e)
  say("mend: %s\n", (msg:gsub("\n+$", "")))
  return EXIT_FAILURE
end

--- Runs the command in args (args[1] is the command) and returns the exit code.
function M.main(args)
  args = args or {}
  local ok, code = xpcall(dispatch, function(e)
    if os.getenv("MEND_DEBUG") and getmetatable(e) ~= CliError then
      io.stderr:write(debug.traceback(tostring(e), 2), "\n")
    end
    return e
  end, args)
  if ok then return code end
  return report(code)
end

return M
