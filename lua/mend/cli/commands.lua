-- mend.cli.commands: what the `mend` command offers: each command's positional arguments, its
-- flags ("value" takes one, "switch" does not), the values a flag may take, its usage and help
-- text, and the module and function that do it (required only when that command runs, so that
-- a command costs no other command's loading); and mend's own usage and help. Data only: it
-- requires no command's module, parses nothing and prints nothing.

local mend = require "mend"

local M = {}

local DB_HELP = "  --db PATH        the database (default mend.db)\n"
local WHO_HELP = "  --who NAME       who asked, recorded in front of this user@host (1-64 printable\n" ..
                 "                   ASCII characters), as X-Mend-Who is through the HTTP API\n"
local LOG_LEVELS = { debug = true, info = true, warn = true, error = true }
local LOG_LEVEL_HELP =
  "  --log-level L    the least level logged to stderr: debug, info (default: every\n" ..
  "                   transition), warn (failures, retries, lost leases) or error\n"
local BUDGET_HELP =
  "  --instruction-budget N  Lua instructions one attempt may run (default: no budget); over\n" ..
  "                   it the attempt fails, not retried, and the worker goes on\n"
-- The flags of a command that loads a workflow's code in an engine of its own: without
-- --sandbox its top level (and, carrying a run on, its steps) runs with io and os.
local SANDBOX_FLAGS = { sandbox = "switch", ["no-sandbox"] = "switch", ["memory-limit"] = "value",
                        ["instruction-budget"] = "value", ["http-allow"] = "value" }
local NO_SANDBOX_HELP =
  "  --no-sandbox     on a database a sandboxed engine opened (marked sandboxed: every\n" ..
  "                   command runs its code sandboxed), run the code unsandboxed, trusted\n" ..
  "                   (mend db trust clears the mark)\n" ..
  "  --http-allow H   the hosts mend.http may call, apart by commas (*.example.com: the\n" ..
  "                   names under example.com); a sandbox allows none without it\n"
local function with_sandbox_flags(flags)
  for k, v in pairs(SANDBOX_FLAGS) do flags[k] = v end
  return flags
end
local SANDBOX_USAGE = "[--sandbox | --no-sandbox] [--memory-limit N] [--instruction-budget N]\n" ..
                      "                  [--http-allow H]"
local SANDBOX_HELP =
  "  --sandbox        load the workflow's code sandboxed, as `mend worker --sandbox` runs it\n" ..
  "                   (README: Limits and sandbox): without it the code runs with io and\n" ..
  "                   os here, trusted\n" ..
  "  --memory-limit N bytes the workflow's code may hold (sandboxed with --sandbox or on a\n" ..
  "                   database marked sandboxed)\n" ..
  "  --instruction-budget N  Lua instructions one attempt may run (default: no budget)\n" ..
  NO_SANDBOX_HELP
local ALERT_HELP =
  "  --alert-command CMD  run with sh -c for each alert (a run in the dead-letter queue),\n" ..
  "                   the alert as one line of JSON on its stdin; without it alerts are\n" ..
  "                   only logged\n"

-- Each command: its positional arguments, its flags, checks of flag values, its usage and
-- help text, and `does`: the module and the function of it that does the command.
local commands = {
  run = {
    args = { "FILE" },
    flags = { input = "value", db = "value", key = "value", clock = "value", seed = "value",
              durability = "value", json = "switch", ["log-level"] = "value",
              ["alert-command"] = "value", ["instruction-budget"] = "value",
              sandbox = "switch", ["no-sandbox"] = "switch", ["memory-limit"] = "value",
              ["http-allow"] = "value" },
    choices = { clock = { virtual = true, real = true },
                durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS },
    usage = "mend run FILE [--input JSON] [--db PATH] [--key K] [--clock virtual|real]\n" ..
            "                [--seed N] [--durability full|process] [--json]\n" ..
            "                [--log-level debug|info|warn|error] [--alert-command CMD]\n" ..
            "                [--instruction-budget N] [--sandbox | --no-sandbox]\n" ..
            "                [--memory-limit N] [--http-allow H]",
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
           "  --memory-limit N bytes the workflow's code may hold, in a state of its own\n" ..
           "                   (sandboxed with --sandbox or on a database marked sandboxed)\n" ..
           NO_SANDBOX_HELP .. "\n" ..
           "Exit codes: 0 succeeded, 3 compensated or failed (or, with --key, a run a person\n" ..
           "resolved), 4 needs attention (dead-letter queue), 1 mend failed (load, storage or\n" ..
           "input error), 2 usage error.\n",
    does = { "mend.cli.run", "run" },
  },
  status = {
    args = { "RUN" },
    flags = { db = "value", json = "switch" },
    usage = "mend status RUN [--db PATH] [--json]",
    help = "Shows a run: its status, input, error and each step's status and attempts.\n\n" ..
           DB_HELP .. "  --json           print the status object as JSON\n",
    does = { "mend.cli.inspect", "status" },
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
    does = { "mend.cli.inspect", "history" },
  },
  worker = {
    args = {},
    flags = { db = "value", workflows = "value", lease = "value", poll = "value",
              grace = "value", ["max-in-flight"] = "value", durability = "value",
              ["log-level"] = "value", ["alert-command"] = "value",
              ["instruction-budget"] = "value", ["park-after"] = "value", clock = "value",
              sandbox = "switch", ["no-sandbox"] = "switch", ["memory-limit"] = "value", listen = "value",
              ["http-allow"] = "value",
              ["token-file"] = "value", ["max-body"] = "value", cors = "value" },
    choices = { durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS,
                clock = { virtual = true, real = true } },
    usage = "mend worker [--db PATH] [--workflows DIR] [--lease S] [--poll S] [--grace S]\n" ..
            "                   [--max-in-flight N] [--durability full|process]\n" ..
            "                   [--park-after S] [--clock virtual|real]\n" ..
            "                   [--log-level debug|info|warn|error] [--alert-command CMD]\n" ..
            "                   [--instruction-budget N] [--sandbox | --no-sandbox]\n" ..
            "                   [--memory-limit N] [--http-allow H]\n" ..
            "                   [--listen HOST:PORT [--token-file F] [--max-body B] [--cors O]]",
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
           "  --memory-limit N bytes the workflows' code may hold, in a state of its own\n" ..
           "                   (sandboxed with --sandbox or on a database marked sandboxed)\n" ..
           NO_SANDBOX_HELP ..
           "  --listen HOST:PORT  also serve the HTTP API there; --token-file, --max-body and\n" ..
           "                   --cors as for mend serve (see mend serve --help), and only\n" ..
           "                   with --listen\n",
    does = { "mend.cli.serve", "worker" },
  },
  serve = {
    args = {},
    flags = with_sandbox_flags { db = "value", workflows = "value", listen = "value",
              ["token-file"] = "value", ["max-body"] = "value", cors = "value",
              durability = "value", ["log-level"] = "value" },
    choices = { durability = { full = true, process = true }, ["log-level"] = LOG_LEVELS },
    usage = "mend serve [--db PATH] [--listen HOST:PORT] [--token-file F] [--workflows DIR]\n" ..
            "                  [--max-body BYTES] [--cors ORIGIN] [--durability full|process]\n" ..
            "                  [--log-level debug|info|warn|error] " .. SANDBOX_USAGE,
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
           "  --max-body BYTES the largest request body (default 1114112: an event's 1 MiB of\n" ..
           "                   data and 64 KiB for the body around it; larger: 413)\n" ..
           "  --cors ORIGIN    answer browsers from ORIGIN (default: no CORS headers)\n" ..
           "  --durability D   full (default: survives power loss) or process, for what it\n" ..
           "                   writes (runs started, events, repairs)\n" .. LOG_LEVEL_HELP ..
           SANDBOX_HELP,
    does = { "mend.cli.serve", "serve" },
  },
  start = {
    args = { "WORKFLOW" },
    flags = with_sandbox_flags { db = "value", input = "value", key = "value", workflows = "value",
                                 durability = "value", who = "value" },
    choices = { durability = { full = true, process = true } },
    usage = "mend start WORKFLOW [--input JSON] [--key K] [--who NAME] [--db PATH] [--workflows DIR]\n" ..
            "                  [--durability full|process] " .. SANDBOX_USAGE,
    help = "Records a new run for a worker to execute and prints its id at once. WORKFLOW is a\n" ..
           "name looked up as DIR/NAME.lua, or a file (./NAME for one named as a workflow).\n" ..
           "With a run key that was used before,\n" ..
           "prints that run's id and records nothing. The run's history records who started it\n" ..
           "(a 'started' row).\n\n" ..
           "  --input JSON     the run's input (default {}); @FILE reads it from FILE, @- from\n" ..
           "                   stdin\n" ..
           "  --key K          run key (idempotency of the start)\n" .. WHO_HELP .. DB_HELP ..
           "  --workflows DIR  where to look WORKFLOW up by name (default workflows)\n" ..
           "  --durability D   full (default: the start survives power loss) or process\n" ..
           SANDBOX_HELP,
    does = { "mend.cli.run", "start" },
  },
  wait = {
    args = { "RUN" },
    flags = { db = "value", timeout = "value", json = "switch" },
    usage = "mend wait RUN [--db PATH] [--timeout S] [--json]",
    help = "Blocks until the run ends and exits with its outcome: 0 succeeded, 3 compensated,\n" ..
           "failed or resolved by a person, 4 needs attention; 5 if --timeout passed first (the run\n" ..
           "goes on); 1 if mend failed (no such run, no database).\n\n" ..
           DB_HELP ..
           "  --timeout S      give up after S seconds\n" ..
           "  --json           print the final status as JSON\n",
    does = { "mend.cli.run", "wait" },
  },
  dlq = {
    args = {},
    flags = { db = "value", json = "switch", limit = "value" },
    usage = "mend dlq [--db PATH] [--json] [--limit N]\n" ..
            "       mend dlq retry RUN [--detach] [--who NAME] [--db PATH] [--sandbox ...]\n" ..
            "       mend dlq resolve RUN --note TEXT [--who NAME] [--db PATH]",
    help = "Lists the dead-letter queue: runs a machine could not settle, with the reason,\n" ..
           "the step, the age and the last error.\n\n" .. DB_HELP ..
           "  --json           print the entries as a JSON array\n" ..
           "  --limit N        the N oldest entries only (1 to 10000; a line on stderr says\n" ..
           "                   when more follow)\n\n" ..
           "'mend dlq retry RUN' and 'mend dlq resolve RUN' repair an entry: see their --help.\n",
    does = { "mend.cli.inspect", "dlq" },
  },
  ["dlq retry"] = {
    args = { "RUN" },
    flags = with_sandbox_flags { db = "value", detach = "switch", who = "value" },
    usage = "mend dlq retry RUN [--detach] [--who NAME] [--db PATH] " .. SANDBOX_USAGE,
    help = "Resumes a run of the dead-letter queue where it stopped, with fresh attempts: the\n" ..
           "compensation that failed, or the step that failed with severity 3. The run then\n" ..
           "executes here to its end (the workflow file it came from is loaded), or, with\n" ..
           "--detach, is left for a worker. Recorded in the run's history with who did it.\n" ..
           "Refused for a run that is not in the queue, and for one compensated after its\n" ..
           "attempts ran out (nothing is left to resume: start a new run).\n\n" .. DB_HELP ..
           WHO_HELP .. SANDBOX_HELP,
    does = { "mend.cli.repair", "dlq_retry" },
  },
  ["dlq resolve"] = {
    args = { "RUN" },
    flags = { db = "value", note = "value", who = "value" },
    usage = "mend dlq resolve RUN --note TEXT [--who NAME] [--db PATH]",
    help = "Takes a run out of the dead-letter queue because a person settled it by hand; the\n" ..
           "run ends 'resolved' and the note is recorded in its history with who did it.\n\n" ..
           DB_HELP .. "  --note TEXT      what was done (required)\n" .. WHO_HELP,
    does = { "mend.cli.repair", "dlq_resolve" },
  },
  cancel = {
    args = { "RUN" },
    flags = with_sandbox_flags { db = "value", who = "value" },
    usage = "mend cancel RUN [--who NAME] [--db PATH] " .. SANDBOX_USAGE,
    help = "Cancels a running run: the attempt in flight is abandoned and the steps done are\n" ..
           "compensated in reverse. If a live worker holds the run, it is asked to, and does\n" ..
           "within a second; otherwise the compensation runs here. Refused for a run that has\n" ..
           "ended.\n\n" .. DB_HELP .. WHO_HELP .. SANDBOX_HELP,
    does = { "mend.cli.repair", "cancel" },
  },
  signal = {
    args = { "RUN" },
    optional = { "NAME" },
    flags = { db = "value", data = "value", key = "value", ["run-key"] = "value", who = "value" },
    usage = "mend signal RUN NAME [--data JSON] [--key K] [--who NAME] [--db PATH]\n" ..
            "       mend signal --run-key K NAME [--data JSON] [--key K] [--who NAME] [--db PATH]",
    help = "Sends event NAME to a running run: a step `wait_for = NAME` takes it, and the data\n" ..
           "is that step's result. The event is kept in the run's inbox until a step takes it,\n" ..
           "each once, in the order sent, with who sent it; a worker holding the run takes it at\n" ..
           "its next poll.\n" ..
           "Refused (exit 1) for a run that has ended or does not exist, and for one that\n" ..
           "compensates or fails (a step failed for good), or whose cancel was asked for and\n" ..
           "is not done yet: it waits for no event any more.\n\n" ..
           DB_HELP ..
           "  --data JSON      the event's payload (default null); @FILE reads it from FILE\n" ..
           "  --key K          idempotency: the same key sent to the run again is one event\n" ..
           "  --run-key K      the run started with this run key (mend start --key), not RUN\n" ..
           WHO_HELP,
    does = { "mend.cli.repair", "signal" },
  },
  complete = {
    args = { "TOKEN" },
    flags = { db = "value", result = "value" },
    usage = "mend complete TOKEN [--result JSON] [--db PATH]",
    help = "Completes the token a step handed out (ctx:token() in a step with wait = \"token\"):\n" ..
           "the step succeeds with the result and its run goes on. A token is single use and\n" ..
           "belongs to the attempt that made it: a token used already, of an earlier attempt,\n" ..
           "or of a run that ended, fails or is being cancelled is refused (exit 1). A worker\n" ..
           "holding the run takes it at its next poll; with no worker running, the next one\n" ..
           "does.\n\n" .. DB_HELP ..
           "  --result JSON    the step's result (default null); @FILE reads it from FILE\n",
    does = { "mend.cli.repair", "complete" },
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
    does = { "mend.cli.repair", "fail" },
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
    does = { "mend.cli.inspect", "workflows" },
  },
  upgrade = {
    args = {},
    optional = { "RUN" },
    flags = with_sandbox_flags { db = "value", workflow = "value", to = "value", file = "value" },
    usage = "mend upgrade RUN|--workflow W [--to VERSION] [--file PATH] [--db PATH]\n" ..
            "                    " .. SANDBOX_USAGE,
    help = "Moves an unfinished run (or every unfinished run of workflow W) to another version\n" ..
           "of its workflow: the newest the database knows, the one --to names (a prefix of it\n" ..
           "is enough), or the one in the file --file gives (recorded as a version). Refused,\n" ..
           "naming the step, when the new version does not keep the steps the run has begun\n" ..
           "(same names, same order), and for a run a live worker holds (stop it first).\n" ..
           "Recorded in the run's history with who did it. Exit 1 if any run was refused.\n\n" ..
           DB_HELP ..
           "  --workflow W     every unfinished run of this workflow\n" ..
           "  --to VERSION     the version to move to (mend workflows lists them)\n" ..
           "  --file PATH      the version in this workflow file\n" .. SANDBOX_HELP,
    does = { "mend.cli.repair", "upgrade" },
  },
  db = {
    args = {},
    optional = { "COMMAND" },
    flags = {},
    usage = "mend db upgrade [--db PATH] [--despite-leases]\n" ..
            "       mend db trust [--db PATH]",
    help = "Changes to the database itself: 'mend db upgrade', 'mend db trust' (see their\n" ..
           "--help).\n",
    does = { "mend.cli.store", "db" },
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
    does = { "mend.cli.store", "db_upgrade" },
  },
  ["db trust"] = {
    args = {},
    flags = { db = "value" },
    usage = "mend db trust [--db PATH]",
    help = "Clears the database's sandbox mark (README: Limits and sandbox): the host's word\n" ..
           "that the code of its workflows, those a sandboxed engine ran and stored included,\n" ..
           "is trusted. Engines that open it after this run that code unsandboxed, with io,\n" ..
           "os and mend.exec, unless told --sandbox; engines open now keep what they are\n" ..
           "until restarted, and a sandboxed engine that opens it marks it again. Prints\n" ..
           "what it did; nothing to do on a database not marked.\n\n" .. DB_HELP,
    does = { "mend.cli.store", "db_trust" },
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
    does = { "mend.cli.inspect", "runs" },
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
    does = { "mend.cli.store", "copy" },
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
    does = { "mend.cli.store", "prune" },
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
           "  --for S          how long 'open' lasts (only with open)\n" ..
           "  --json           print the list as a JSON array (only without an operation)\n",
    does = { "mend.cli.repair", "breakers" },
  },
  repl = {
    args = {},
    flags = { db = "value", clock = "value", seed = "value", ["no-sandbox"] = "switch" },
    choices = { clock = { virtual = true, real = true } },
    default_db = ":memory:",
    usage = "mend repl [--db PATH] [--clock virtual|real] [--seed N] [--no-sandbox]",
    help = "An interactive Lua shell around one engine: load workflows (use), start runs, move\n" ..
           "the virtual clock with advance(seconds), break simulated services (sim) and watch\n" ..
           "the retries, breakers and compensations; help() lists what is in scope. On a\n" ..
           "terminal it has line editing, TAB completion and a history kept in ~/.mend_history\n" ..
           "($MEND_HISTFILE names another file; empty: none); otherwise it reads a script from\n" ..
           "stdin, one chunk at a time, and prints the results.\n\n" ..
           "  --db PATH        the database (default :memory:)\n" ..
           "  --clock C        virtual (default: time moves only with advance and run) or real\n" ..
           "  --seed N         seed of the backoff jitter generator (default random)\n" ..
           NO_SANDBOX_HELP,
    does = { "mend.cli.run", "repl" },
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
  db trust      clear the sandbox mark: the database's workflows are trusted again
  repl          an interactive shell: use a workflow, start, advance the clock, inspect

Run 'mend <command> --help' for a command's options; 'mend --version' prints the version.

Exit codes of mend run: 0 the run succeeded, 3 it was compensated or failed, 4 it needs
attention (dead-letter queue). Of every command: 1 mend itself failed, 2 usage error;
status, history and dlq exit 0 when they could answer.
]]

M.commands, M.MAIN_USAGE, M.MAIN_HELP = commands, MAIN_USAGE, MAIN_HELP
return M
