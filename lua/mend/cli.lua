-- mend.cli: the `mend` command. A client of the Lua API (docs/lua-api.md), as lua.c is of the
-- Lua library: it parses arguments, drives an engine and prints (through mend.render, which
-- the REPL shares). It never reads the database by itself and holds no workflow logic.
--
-- This file is the dispatcher: it parses a command's arguments against mend.cli.commands,
-- prints help, calls the command's module (mend.cli.run, .inspect, .repair, .store, .serve,
-- required only when its command runs) and turns what was raised into a message and an exit
-- code. It does no command's work itself.
--
-- M.main(args) takes the arguments after the program name (args[1] is the command) and
-- returns the exit code: 0 the run succeeded, 3 it was compensated or failed, 4 it needs
-- attention, 1 mend itself failed, 2 usage error. status, history and dlq exit 0 when they
-- could answer.

local mend = require "mend"
local base = require "mend.cli.base"
local spec = require "mend.cli.commands"

local M = {}

local commands, MAIN_USAGE, MAIN_HELP = spec.commands, spec.MAIN_USAGE, spec.MAIN_HELP
local out, say, usage_error, CliError = base.out, base.say, base.usage_error, base.CliError
local EXIT_OK, EXIT_FAILURE, EXIT_USAGE = base.EXIT_OK, base.EXIT_FAILURE, base.EXIT_USAGE

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
    local seed = math.tointeger(base.decimal(opts.seed))
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
        -- which of two was meant is not known: the last must not silently win
        if opts[name] ~= nil then
          usage_error(cmd_name, "--%s is given twice: give it once", name)
        end
        opts[name] = value
      end
    end
    i = i + 1
  end
  if #positional < #cmd.args then usage_error(cmd_name, "missing %s", cmd.args[#positional + 1]) end
  local most = #cmd.args + #(cmd.optional or {})
  for k, a in ipairs(positional) do
    -- `mend status "$ID"` with ID unset: "no run " would name nothing
    if a == "" then
      usage_error(cmd_name, "%s is empty", cmd.args[k] or (cmd.optional or {})[k - #cmd.args] or "an argument")
    end
  end
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
  if name == "db" and (args[2] == "upgrade" or args[2] == "trust") then
    name, first = "db " .. args[2], 3
  end
  local cmd = commands[name]
  if not cmd then usage_error(nil, "unknown command %s", name) end
  local opts, positional = parse(name, args, first)
  if not opts then return print_help(name) end
  return require(cmd.does[1])[cmd.does[2]](opts, table.unpack(positional))
end

-- A message may hold a workflow's text (a file that raised as it loaded, a name): shown, not
-- obeyed, as mend.render shows it, its line breaks kept.
local function report(e)
  local shown = require("mend.render").visible
  if getmetatable(e) == CliError then
    say("mend: %s\n", shown(e.message, true))
    if e.code == EXIT_USAGE then
      local cmd = commands[e.command]
      say("usage: %s\n", cmd and cmd.usage or MAIN_USAGE)
      say("Run 'mend %s--help' for more.\n", e.command and (e.command .. " ") or "")
    end
    return e.code
  end
  local msg = type(e) == "string" and e or tostring(e)
  say("mend: %s\n", shown((msg:gsub("\n+$", "")), true))
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
