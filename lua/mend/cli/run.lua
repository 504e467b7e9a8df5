-- mend.cli.run: the commands that start runs or follow one to its end: `mend run` (a workflow
-- executed here, its outcome and timeline printed), `mend start` (a run recorded for a worker),
-- `mend wait` (a run's end awaited), and `mend repl` (mend.repl's shell). It drives an engine
-- through the Lua API, never reads the database by itself, and holds no workflow logic.

local mend = require "mend"
local base = require "mend.cli.base"
local files = require "mend.cli.files"
local render = require "mend.render"

local out, say, fail = base.out, base.say, base.fail
local with_engine, existing_db, run_status = base.with_engine, base.existing_db, base.run_status
local OUTCOME_EXIT = base.OUTCOME_EXIT
local EXIT_OK = base.EXIT_OK
local present, write_json, unfinished = render.present, render.write_json, render.unfinished
local print_events, print_outcome, due_lines = render.print_events, render.print_outcome, render.due_lines

local M = {}

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

-- An empty --key is known from the command line alone: refused before a database is made
-- (`--key "$ORDER"` with ORDER unset), with the engine's words.
local function check_key(o)
  if o.key == "" then fail("the run key is empty: give a key, or none") end
end

-- The child runs of run id left unfinished with it, that no live worker holds (its `mend run`
-- was killed as a child ran: the child was this process's too), carried on here, theirs too:
-- the parent's step waits for their end, which nothing else would bring.
local function resume_children(eng, id)
  local st = run_status(eng, id)
  for _, child in ipairs(st and st.children or {}) do
    if unfinished(child) and eng:resume(child.run_id) == "resumed" then
      say("mend: its child run %s (step %s) was left unfinished too; resuming it here\n",
          child.run_id, child.step)
      resume_children(eng, child.run_id)
    end
  end
end

function M.run(o, file)
  local input = base.decode_input(o.input)
  check_key(o)
  base.check_readable(file)
  local level, live = run_output(o)
  local conf = { db = o.db, clock = o.clock, seed = o.seed, durability = o.durability,
                 log = "stderr", log_level = level, alert_command = o["alert-command"],
                 instruction_budget = base.budget_flag(o), memory_limit = base.memory_flag(o),
                 http_allow = base.http_allow_flag(o),
                 sandbox = o.sandbox or nil, no_sandbox = base.no_sandbox_flag(o),
                 command = o._command }
  return with_engine(conf, function(eng)
    local name = eng:load(file)
    local id, existed = base.call(eng.start, eng, name, input, { key = o.key })
    if existed then
      say("mend: run key %s names the existing run %s\n", o.key, id)
      -- Left unfinished: carried on here, or waited for while a live worker holds it (and
      -- carried on here if that worker dies meanwhile).
      local told
      while unfinished(run_status(eng, id)) do
        local how, worker = eng:resume(id)
        if how == "resumed" then
          say("mend: run %s was left unfinished and no live worker holds it; resuming it here\n", id)
          resume_children(eng, id)
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
        base.each_page(eng, id, 0, nil, function(page)
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

function M.start(o, workflow)
  local input = base.decode_input(o.input)
  check_key(o)
  local by = base.who(o, "start")
  local file, found = files.workflow_file(o, workflow)   -- found: by the name, or the path
  return with_engine(base.sandboxed(o, { db = o.db, durability = o.durability }), function(eng)
    local name = file and eng:load(file) or files.load_named(eng, o, workflow, found)
    if file and found and name ~= workflow then
      files.refuse_named_other(eng, o, workflow, file, name)
    end
    local id, existed = base.call(eng.start, eng, name, input,
                                  { key = o.key, detached = true, who = by })
    -- stdout holds the id alone, for scripts; a key that was used before is told on stderr (a
    -- key of another workflow's run is refused by eng:start, exit 1)
    if existed then
      say("mend: run key %s names the existing run %s, a run of workflow %s\n", o.key, id, name)
    end
    out("%s\n", id)
    return EXIT_OK
  end)
end

function M.wait(o, id)
  local timeout = o.timeout and base.number_flag(o, "timeout", nil)   -- a usage error before any look
  return with_engine(existing_db(o.db), function(eng)
    local st = run_status(eng, id)
    if unfinished(st) and not present(st.held_by) then
      local due = due_lines(st, eng:now())
      say("mend: run %s is waiting for a worker: no live worker holds it (start one: mend worker"
          .. " --db %s)%s\n", id, render.shell_word(render.db_shown(o.db)),
          #due > 0 and ("; " .. table.concat(due, "; ")) or "")
    end
    local st = eng:wait(id, { timeout = timeout })
    if not st then
      say("mend: run %s did not finish within %ss\n", id, o.timeout)
      return base.EXIT_STILL_RUNNING
    end
    if o.json then write_json(st) else print_outcome(st) end
    return OUTCOME_EXIT[st.status]
  end)
end

function M.repl(o)
  return require("mend.repl").main{ db = o.db, clock = o.clock or "virtual", seed = o.seed,
                                    no_sandbox = base.no_sandbox_flag(o) }
end

return M
