-- mend.cli.repair: the commands by which a person acts on runs and breakers, each recorded
-- with who did it: `mend dlq retry` and `mend dlq resolve`, `mend cancel`, `mend signal`,
-- `mend complete` and `mend fail` (a step's token), `mend upgrade` (runs moved to another
-- version) and `mend breakers` (listed, or overridden by hand). A repair that carries a run on
-- does it here, in an engine that has loaded the run's own workflow version. It never reads
-- the database by itself and decides nothing the engine decides: a refusal is the engine's.

local base = require "mend.cli.base"
local render = require "mend.render"

local out, say, fail, usage_error = base.out, base.say, base.fail, base.usage_error
local with_engine, existing_db, run_status = base.with_engine, base.existing_db, base.run_status
local operate, refusal, who = base.operate, base.refusal, base.who
local EXIT_OK, EXIT_FAILURE, OUTCOME_EXIT = base.EXIT_OK, base.EXIT_FAILURE, base.OUTCOME_EXIT
local present, write_list, print_outcome = render.present, render.write_list, render.print_outcome

local M = {}

function M.breakers(o, op, key)
  if op ~= nil and not ({ reset = true, open = true, close = true })[op] then
    usage_error("breakers", "unknown breaker operation %s (reset, open or close)", op)
  end
  if o["for"] and op ~= "open" then
    usage_error("breakers", "--for is how long open lasts: give it with open")
  end
  if o.json and op ~= nil then
    usage_error("breakers", "--json prints the list: give it without an operation")
  end
  if op == nil then
    return with_engine(existing_db(o.db), function(eng)
      local list = render.breakers_now(eng:breakers(), eng:now())
      if o.json then write_list(list) else render.print_breakers(list, eng:now()) end
      return EXIT_OK
    end)
  end
  if key == nil then usage_error("breakers", "missing KEY") end
  return with_engine(existing_db(o.db), function(eng)
    operate("breaker", eng.breaker, eng, key, op,
            { seconds = o["for"] and base.number_flag(o, "for"), who = who() })
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
  local conf = base.sandboxed(o, existing_db(o.db))
  conf.log = "stderr"
  return with_engine(conf, function(eng)
    if optional then pcall(load_run_workflow, eng, id) else load_run_workflow(eng, id) end
    return fn(eng)
  end)
end

function M.dlq_retry(o, id)
  local by = who(o, "dlq retry")
  return with_run_engine(o, id, function(eng)
    operate("dlq_retry", eng.dlq_retry, eng, id, { who = by })
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

function M.dlq_resolve(o, id)
  -- a note of blanks says nothing of what was done: refused as a missing one is
  if not o.note or not o.note:find("%S") then
    usage_error("dlq resolve", "--note TEXT is required: say what was done")
  end
  local by = who(o, "dlq resolve")
  return with_engine(existing_db(o.db), function(eng)
    operate("resolve", eng.resolve, eng, id, { note = o.note, who = by })
    out("run %s resolved\n", id)
    return EXIT_OK
  end)
end

-- The version `mend upgrade` moves runs to: the one the file given has (loading it here
-- records it with the runs it takes), the one --to names (a prefix is enough), or the newest
-- the store knows.
local function upgrade_target(o, eng, name)
  if o.file then
    base.check_readable(o.file)
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

function M.upgrade(o, id)
  if (id == nil) == (o.workflow == nil) then
    usage_error("upgrade", "give either a RUN or --workflow W")
  end
  return with_engine(base.sandboxed(o, existing_db(o.db)), function(eng)
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
      if id and not ok then fail("%s", refusal("upgrade", how)) end
      if not ok then
        refused = refused + 1
        say("mend: %s\n", refusal("upgrade", how))
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

function M.cancel(o, id)
  local by = who(o, "cancel")
  return with_run_engine(o, id, function(eng)
    local how, why = operate("cancel", eng.cancel, eng, id, { who = by })
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

function M.signal(o, first, second)
  local id, name = first, second
  if o["run-key"] then
    if second ~= nil then usage_error("signal", "give RUN or --run-key, not both") end
    id, name = nil, first
  elseif second == nil then
    usage_error("signal", "missing NAME")
  end
  local data = base.json_flag(o, "data")
  local by = who(o, "signal")
  return with_engine(existing_db(o.db), function(eng)
    local opts = { key = o.key, run_key = o["run-key"], who = by }
    local sent, how, run = pcall(eng.signal, eng, id, name, data, opts)
    local why = not sent and how
    if not sent and type(why) == "table" and why.code == "deferred" then
      -- Another process's lock outlasted the wait: the engine keeps the event in the batch that
      -- waits for it, and would commit it as it closes if the lock went in that instant. A
      -- command that answers "not sent" must not send it: it ends here, the engine and its
      -- batch given up unclosed (nothing of the event is on disk; SQLite needs no close).
      say("mend: %s: not sent, nothing recorded; send it again once the lock goes\n",
          refusal("signal", why))
      io.stdout:flush()
      os.exit(EXIT_FAILURE, false)
    end
    if not sent then fail("%s", refusal("signal", why)) end
    if how == "duplicate" then
      out("run %s has event %s with key %s already: nothing sent\n", run, name, o.key)
    else
      out("event %s sent to run %s\n", name, run)
    end
    return EXIT_OK
  end)
end

function M.complete(o, token)
  local result = base.json_flag(o, "result")
  return with_engine(existing_db(o.db), function(eng)
    local run = operate("complete", eng.complete, eng, token, result)
    out("token completed: run %s goes on\n", run)
    return EXIT_OK
  end)
end

function M.fail(o, token)
  if not o.kind then usage_error("fail", "missing --kind (retryable, fatal or compensable)") end
  return with_engine(existing_db(o.db), function(eng)
    local run = operate("fail", eng.fail, eng, token, { kind = o.kind, message = o.message })
    out("token failed (%s): run %s handles it\n", o.kind, run)
    return EXIT_OK
  end)
end

return M
