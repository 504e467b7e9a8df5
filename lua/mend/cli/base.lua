-- mend.cli.base: what every command of `mend` shares: its output, its own errors (a usage
-- error, a failure of the command) and their exit codes, the engine a command opens and closes,
-- and the readers of flag values that more than one command takes. It never reads the
-- database by itself, prints no run (mend.render does), and knows no command: a command's
-- module requires it, never the other way round.

local mend = require "mend"
local pages = require "mend.pages"
local quoted = require("mend.render").quoted
local json = mend.json

local M = {}

M.EXIT_OK, M.EXIT_FAILURE, M.EXIT_USAGE = 0, 1, 2
-- `mend wait --timeout`: the run goes on; apart from 1, so a script tells it from a typo'd id
M.EXIT_STILL_RUNNING = 5
M.OUTCOME_EXIT = { succeeded = 0, compensated = 3, failed = 3, needs_attention = 4, resolved = 3 }
local EXIT_FAILURE, EXIT_USAGE = M.EXIT_FAILURE, M.EXIT_USAGE

---------------------------------------------------------------------------------------------
-- Output and the CLI's own errors

function M.out(fmt, ...) io.stdout:write(fmt:format(...)) end
function M.say(fmt, ...) io.stderr:write(fmt:format(...)) end

-- Errors of the CLI itself carry this metatable; anything else raised (a load error, a
-- storage error) is the engine's and is reported as it is.
M.CliError = {}
local CliError = M.CliError

function M.fail(fmt, ...)
  error(setmetatable({ code = EXIT_FAILURE, message = fmt:format(...) }, CliError), 0)
end
local fail = M.fail

function M.usage_error(cmd, fmt, ...)
  error(setmetatable({ code = EXIT_USAGE, command = cmd, message = fmt:format(...) }, CliError), 0)
end
local usage_error = M.usage_error

---------------------------------------------------------------------------------------------
-- Engines

-- What the CLI puts in a conf for itself, not for mend.engine: whether the command loads
-- workflow code, and the command's name for a usage error.
local NOT_ENGINE = { loads_code = true, command = true }
local MEMORY_USAGE = "--memory-limit needs --sandbox (or a database marked sandboxed)"

-- A fresh engine for conf. --memory-limit holds the code of a sandbox: given without
-- --sandbox, it is taken on a database whose mark sandboxes the engine, refused otherwise (the
-- code would run trusted, in a state of its own, held to a limit it was not asked under); on
-- a database not marked, by memory_flag before the engine opens it.
-- A command that loads workflow code (conf.loads_code) and logs nothing says on stderr that
-- the database's mark sandboxed it (one that logs has the engine's warn line).
function M.open_engine(conf)
  local c = {}
  for k, v in pairs(conf) do
    if not NOT_ENGINE[k] then c[k] = v end
  end
  local eng = mend.engine(c)
  local how, note = eng:sandboxed()
  if conf.memory_limit and not conf.sandbox and how ~= "mark" then
    eng:close()
    usage_error(conf.command, MEMORY_USAGE)
  end
  if note and conf.loads_code and not conf.log then M.say("mend: %s\n", note) end
  return eng
end

-- Calls fn(eng) with a fresh engine and closes it, whatever fn does.
function M.with_engine(conf, fn)
  local eng = M.open_engine(conf)
  local res = table.pack(pcall(fn, eng))
  eng:close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- The read-only commands must not create a database where there was none: a SQLite file (a
-- "file:" URI's, read as SQLite reads it: mend.db_where) must be there, and it or a
-- PostgreSQL database must hold mend's schema: the engine opens it only if it does (existing;
-- an empty file was given mend's schema), which it finds in its open's one login.
function M.existing_db(path)
  local kind, file = mend.db_where(path)
  if kind == "file" then
    -- opening a named pipe blocks until a writer comes: what is no regular file is refused
    -- before it is opened (a symbolic link to one is one)
    local dir, name = file:match("^(.*)/([^/]+)$")
    if not dir then dir, name = ".", file elseif dir == "" then dir = "/" end
    local listed, names, regular = pcall(mend.listdir, dir)
    if listed and not regular[name] then
      for _, n in ipairs(names) do
        if n == name then
          fail("database %s is not a regular file (a named pipe, a folder or a device?): give "
               .. "the database file", path)
        end
      end
    end
    local f = io.open(file, "rb")
    if not f then fail("no database %s", path) end
    f:close()
  end
  return { db = path, existing = (kind == "postgres" or kind == "file") or nil }
end

-- The status of run id; an unknown run (nil from the engine) is a failure of the command, and
-- any error raised is the engine's own.
function M.run_status(eng, id)
  local st = eng:status(id)
  if not st then fail("no run %s", id) end
  return st
end

-- The message of an engine operation's refusal without the operation's name in front
-- ("dlq_retry: run ... is ..." -> "run ... is ..."): the command's own name is in front of
-- what it prints already.
function M.refusal(prefix, err)
  local text = tostring(err)
  local head = prefix .. ": "
  if text:sub(1, #head) == head then return text:sub(#head + 1) end
  return text
end

-- Calls an engine method whose refusal names the Lua line that called it, as the Lua API's
-- do: raised again as the engine words it, without this file's line, which is no user's.
function M.call(method, eng, ...)
  local res = table.pack(pcall(method, eng, ...))
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- Calls an engine operation; its refusal becomes mend's error.
function M.operate(prefix, method, eng, ...)
  local res = table.pack(pcall(method, eng, ...))
  if not res[1] then fail("%s", M.refusal(prefix, res[2])) end
  return table.unpack(res, 2, res.n)
end

-- A page of the run's history; a run gone meanwhile (pruned) is a failure of the command.
function M.history_page(eng, id, opts)
  local page, err = eng:history(id, opts)
  if not page then fail("%s", err) end
  return page
end

-- Calls each(page) with the run's rows after seq `after` up to seq `upto` (all if nil), a page
-- at a time (mend.pages); a run gone meanwhile is a failure of the command.
function M.each_page(eng, id, after, upto, each)
  local last, err = pages.each(eng, id, after, upto, each)
  if not last then fail("%s", err) end
end

-- Who does an operation, for the history: the user and host of this process, with the name
-- --who gives in front (`alice via user@host (mend cli)`), as X-Mend-Who is through the HTTP
-- API, and held to the same rule: 1 to 64 printable ASCII characters (an empty one, as an
-- unset shell variable gives, would record no one; a control character would forge a line).
function M.who(o, cmd)
  local named = o and o.who
  if named ~= nil and (#named < 1 or #named > 64 or named:find("[^\32-\126]")) then
    usage_error(cmd, "--who NAME must be 1 to 64 printable ASCII characters, got %s",
                quoted(named))
  end
  local p = io.popen("id -un 2>/dev/null; hostname 2>/dev/null")
  local user, host = p and p:read("l"), p and p:read("l")
  if p then p:close() end
  local me = ("%s@%s (mend cli)"):format(user or os.getenv("USER") or "unknown", host or "?")
  return named and ("%s via %s"):format(named, me) or me
end

---------------------------------------------------------------------------------------------
-- Flag values

-- The JSON text of a flag; `@FILE` (`@-`: stdin) reads it from there: a command line holds at
-- most 128 KiB in one argument, and no JSON text begins with @.
function M.json_text(flag, text)
  local file = text:match("^@(.*)$")
  if not file then return text end
  local f, err = io.stdin, nil
  if file ~= "-" then f, err = io.open(file, "rb") end
  if not f then fail("cannot read --%s %s", flag, err) end
  local why
  text, why = f:read("a")
  if f ~= io.stdin then f:close() end
  -- a folder opens as a file would, and only its read fails
  if not text then fail("cannot read --%s %s: %s", flag, file, why) end
  return text
end

-- JSON text given on the command line is read as the HTTP API reads a body: of a key given
-- twice in one object, which was meant is not known.
local REFUSE_TWICE = { duplicates = false }

-- The JSON value of flag `name` (nil when not given).
function M.json_flag(o, name)
  if o[name] == nil then return nil end
  local ok, v = pcall(json.decode, M.json_text(name, o[name]), REFUSE_TWICE)
  if not ok then fail("--%s is not JSON: %s", name, tostring(v)) end
  return v
end

function M.decode_input(text)
  if text == nil then return {} end
  text = M.json_text("input", text)
  local ok, v = pcall(json.decode, text, REFUSE_TWICE)
  if not ok then fail("invalid --input JSON: %s", tostring(v)) end
  return v
end

function M.check_readable(file)
  local f, err = io.open(file, "rb")
  if not f then fail("cannot open workflow %s", err) end
  f:close()
end

-- A flag's text as a decimal number, or nil: Lua's tonumber also takes "0x10" (16 seconds).
function M.decimal(v)
  return type(v) == "string" and v:match("^[-+]?%d*%.?%d*[eE]?[-+]?%d*$") and tonumber(v) or nil
end

function M.number_flag(o, name, default)
  local v = o[name]
  if v == nil then return default end
  local n = M.decimal(v)
  -- 1e999 reads as infinity: no lease, poll or grace can last that long (PostgreSQL refuses
  -- such an interval only once the worker runs)
  if not n or not (n > 0 and n < math.huge) then
    usage_error(o._command, "--%s must be a finite number > 0, got %s", name, v)
  end
  return n
end

-- A count (0 when not given): 2.5 is no count, and had been read as no limit.
-- The most a count flag takes: the engine keeps such counts in a C int, which 2^32 + 1 would
-- have reached as 1 (a worker serving one run at a time, unsaid).
M.COUNT_MAX = 2147483647

function M.whole_flag(o, name)
  if o[name] == nil then return 0 end
  local n = math.tointeger(M.decimal(o[name]))
  -- one message for every value that is no count: 0 is not "a finite number > 0" to fix
  if not n or n < 1 or n > M.COUNT_MAX then
    usage_error(o._command, "--%s must be a whole number from 1 to %d, got %s", name, M.COUNT_MAX,
                o[name])
  end
  return n
end

-- --instruction-budget N: a whole number of instructions, or nil.
function M.budget_flag(o)
  if o["instruction-budget"] == nil then return nil end
  local n = math.tointeger(M.decimal(o["instruction-budget"]))
  if not n or n < 1 then
    usage_error(o._command, "--instruction-budget must be a whole number >= 1, got %s",
                o["instruction-budget"])
  end
  return n
end

-- --memory-limit N: bytes, or nil. The workflow's code runs in a Lua state of the engine's own,
-- held to N: sandboxed with --sandbox or on a database marked sandboxed, else refused. Without
-- --sandbox the mark is looked at here, before the engine opens (mend.db_mark makes nothing): no
-- database, or one with no mend schema (an empty PostgreSQL database), is not marked, and the
-- engine would make one (open_engine refuses --no-sandbox on a marked one).
function M.memory_flag(o)
  if o["memory-limit"] == nil then return nil end
  local n = math.tointeger(M.decimal(o["memory-limit"]))
  if not n or n < 1 then
    usage_error(o._command, "--memory-limit must be a whole number of bytes >= 1, got %s",
                o["memory-limit"])
  end
  if not o.sandbox and o.db and mend.db_mark(o.db) ~= "marked" then
    usage_error(o._command, MEMORY_USAGE)
  end
  return n
end

-- --http-allow host,*.example.com: the hosts mend.http may call (a list), or nil: any host,
-- none in a sandbox (a database's mark included).
function M.http_allow_flag(o)
  if o["http-allow"] == nil then return nil end
  local list = {}
  for item in (o["http-allow"] .. ","):gmatch("([^,]*),") do
    item = item:match("^%s*(.-)%s*$")
    if item == "" then
      usage_error(o._command, "--http-allow: an empty host in %s (hosts apart by commas)",
                  quoted(o["http-allow"]))
    end
    -- "*" reads as "any host" and would be the host named "*": no URL has it
    if item == "*" or item:find("%s") then
      usage_error(o._command, "--http-allow: %s is not a host (a name, an address, or *.domain; "
                  .. "hosts apart by commas)", quoted(item))
    end
    list[#list + 1] = item
  end
  return list
end

-- --no-sandbox: true or nil. A database a sandboxed engine opened is marked so, and every
-- engine opens it sandboxed unless told this (README: Limits and sandbox); said on stderr.
function M.no_sandbox_flag(o)
  if not o["no-sandbox"] then return nil end
  if o.sandbox then usage_error(o._command, "--sandbox and --no-sandbox: give one of them") end
  io.stderr:write("mend: --no-sandbox: the workflows' code runs unsandboxed, with io and os, "
                  .. "even where a sandboxed engine ran it\n")
  return true
end

-- Flags (the names after `needed`) that do nothing without flag `needed` are refused without
-- it, never ignored: the user meant them to do something.
function M.needs(o, needed, ...)
  if o[needed] then return end
  for _, flag in ipairs { ... } do
    if o[flag] ~= nil then usage_error(o._command, "--%s needs --%s", flag, needed) end
  end
end

-- conf with the engine's limits the flags give: --sandbox, --memory-limit, --instruction-budget,
-- --http-allow.
-- A command that loads a workflow's code (a stored version or a file) runs its top level and,
-- carrying a run on, its steps: code a sandboxed worker ran must be loaded so here too.
function M.sandboxed(o, conf)
  conf.sandbox = o.sandbox or nil
  conf.no_sandbox = M.no_sandbox_flag(o)
  conf.memory_limit = M.memory_flag(o)
  conf.instruction_budget = M.budget_flag(o)
  conf.http_allow = M.http_allow_flag(o)
  conf.loads_code = true
  conf.command = o._command
  return conf
end

-- --status S, one of `allowed` (what: what the status is, for the message).
function M.check_status(o, allowed, what)
  if o.status == nil then return end
  for _, s in ipairs(allowed) do
    if s == o.status then return end
  end
  usage_error(o._command, "--status %s: %s is one of %s", o.status, what, table.concat(allowed, ", "))
end

return M
