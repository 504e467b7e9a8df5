-- mend.cli.serve: the long-running commands: `mend worker` (runs executed until stopped, the
-- workflows directory watched) and `mend serve` (the HTTP API alone), either with the HTTP API
-- of mend.listen on the engine's loop. Every flag is checked before the engine opens the
-- database. It holds no scheduling of its own (the engine's serve loop does that) and never
-- reads the database by itself.

local core = require "mend.core"   -- its _hear_stop, for a worker whose files load
local base = require "mend.cli.base"
local dir_files = require "mend.cli.files"

local fail, usage_error, out = base.fail, base.usage_error, base.out
local with_engine, number_flag = base.with_engine, base.number_flag
local workflow_files, workflow_loader = dir_files.workflow_files, dir_files.workflow_loader
local EXIT_OK = base.EXIT_OK

local M = {}

-- The HTTP API on the engine's loop (mend.listen), for `mend serve` and `mend worker --listen`:
-- its flags are checked before the engine opens the database.
local LISTEN_CLI = { fail = fail, usage_error = usage_error, out = out }
local function listen_options(o) return require("mend.listen").options(o, LISTEN_CLI) end
local function with_listener(eng, opts, fn)
  return require("mend.listen").with_listener(eng, opts, fn, LISTEN_CLI)
end

function M.worker(o)
  local conf = { db = o.db, durability = o.durability, log = "stderr",
                 log_level = o["log-level"], alert_command = o["alert-command"],
                 instruction_budget = base.budget_flag(o), memory_limit = base.memory_flag(o),
                 http_allow = base.http_allow_flag(o),
                 sandbox = o.sandbox or nil, no_sandbox = base.no_sandbox_flag(o),
                 lease = number_flag(o, "lease", 30), grace = number_flag(o, "grace", 10),
                 clock = o.clock, park_after = 1,
                 buffered_print = true,   -- a workflow's print never blocks the worker
                 command = o._command }
  if o["park-after"] then   -- 0: never (to the engine, < 0; its 0 is the default)
    local n = base.decimal(o["park-after"])
    if not n or not (n >= 0 and n < math.huge) then
      usage_error(o._command, "--park-after must be a finite number >= 0, got %s", o["park-after"])
    end
    conf.park_after = n > 0 and n or -1
  end
  -- every flag is checked before anything is opened or loaded; the HTTP API's only with
  -- --listen (without it, a token file that cannot be read is named before the flags that
  -- need --listen are refused)
  local serving = { poll = number_flag(o, "poll", 0.1), max_in_flight = base.whole_flag(o, "max-in-flight"),
                    every = 2 }
  if not o.listen then require("mend.listen").token(o, LISTEN_CLI) end
  base.needs(o, "listen", "token-file", "max-body", "cors")
  local listen = o.listen and listen_options(o)
  local files = workflow_files(o.workflows or "workflows")
  if #files == 0 then fail("no workflow files (*.lua) in %s", o.workflows or "workflows") end
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
function M.serve(o)
  local conf = base.sandboxed(o, { db = o.db, durability = o.durability, log = "stderr",
                                   log_level = o["log-level"] })
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

return M
