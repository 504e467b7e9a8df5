-- mend.repl: the interactive shell of `mend repl`. A client of the Lua API, as mend.cli is: it
-- holds one engine (`eng`), evaluates what is typed in an environment with a few helpers
-- (load, start, advance, run, status, history, runs, dlq, breakers, show, help, quit), prints
-- returned values as nested, sorted Lua tables, and after every helper that moves the engine
-- prints what happened, with the CLI's own timeline renderer.
--
-- On a terminal it reads lines through mend.core's readline (libedit: line editing, history,
-- TAB completion of globals, `mend.` fields and `eng:` methods); otherwise it reads stdin,
-- with no prompt, so a script can be piped in and its output checked. A chunk that is
-- incomplete (Lua's "<eof>" syntax error) continues on the next line, as in lua.c.
--
-- M.main{db=, clock=, seed=} runs the shell and returns the exit code: 0, or 1 when reading
-- a script from stdin and one of its chunks failed.

local mend = require "mend"
local cli = require "mend.cli"
local sim = require "mend.sim"
local json = mend.json

local M = {}

local PROMPT, PROMPT2 = "mend> ", "...> "
local WIDTH = 96                  -- pretty printing: tables that fit stay on one line

local function out(fmt, ...) io.stdout:write(fmt:format(...)) end

---------------------------------------------------------------------------------------------
-- Pretty printing

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

local function is_name(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil and not KEYWORDS[s]
end

local ESCAPES = { ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r", ['"'] = '\\"',
                  ["\\"] = "\\\\" }

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or ("\\%03d"):format(c:byte())
  end) .. '"'
end

local function scalar(v)
  if v == json.null then return "null" end
  if type(v) == "string" then return quote(v) end
  return tostring(v)
end

-- Keys other than the array part 1..n, numbers first, then strings, then the rest.
local TYPE_ORDER = { number = 1, string = 2, boolean = 3 }

local function other_keys(t, n)
  local keys = {}
  for k in next, t do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b)
    local ta, tb = TYPE_ORDER[type(a)] or 4, TYPE_ORDER[type(b)] or 4
    if ta ~= tb then return ta < tb end
    if ta <= 2 then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local function key_text(k)
  if is_name(k) then return k .. " = " end
  return "[" .. scalar(k) .. "] = "
end

local function render(v, indent, seen)
  if type(v) ~= "table" or v == json.null then return scalar(v) end
  if seen[v] then return "<cycle>" end
  seen[v] = true
  local n = 0
  while rawget(v, n + 1) ~= nil do n = n + 1 end
  local inner, parts = indent .. "  ", {}
  for i = 1, n do parts[#parts + 1] = render(rawget(v, i), inner, seen) end
  for _, k in ipairs(other_keys(v, n)) do
    parts[#parts + 1] = key_text(k) .. render(rawget(v, k), inner, seen)
  end
  seen[v] = nil
  if #parts == 0 then return "{}" end
  local one = "{ " .. table.concat(parts, ", ") .. " }"
  if #indent + #one <= WIDTH and not one:find("\n", 1, true) then return one end
  return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. ",\n" .. indent .. "}"
end

--- The text of a value: scalars as Lua literals, tables nested with sorted keys.
function M.pretty(v) return render(v, "", {}) end

---------------------------------------------------------------------------------------------
-- Completion

-- The string keys of t, and of the tables its metatables' __index lead to.
local function field_names(v, names, depth)
  depth = depth or 0
  if depth > 8 then return names end
  if type(v) == "table" then
    for k in next, v do
      if type(k) == "string" then names[k] = true end
    end
  end
  local mt = getmetatable(v)
  local index = type(mt) == "table" and rawget(mt, "__index")
  if type(index) == "table" then field_names(index, names, depth + 1) end
  return names
end

local function get(v, k)
  local ok, r = pcall(function() return v[k] end)
  if ok then return r end
  return nil
end

-- The value of a dotted path ("mend.json") in env, or nil.
local function resolve(env, path)
  local v = env
  for name in path:gmatch("[^.]+") do
    if type(v) ~= "table" and type(v) ~= "userdata" then return nil end
    v = get(v, name)
  end
  return v
end

--- The completions of the word that ends `text`: globals, `a.b.` fields and `obj:` methods.
function M.complete(env, text)
  local head, word = text:match("^(.-)([%w_.:]*)$")
  local path, sep, partial = word:match("^([%a_][%w_.]*)([.:])([%w_]*)$")
  local names = {}
  if path then
    if path:find("..", 1, true) or path:sub(-1) == "." then return {} end
    local v = resolve(env, path)
    if v == nil then return {} end
    for name in pairs(field_names(v, {})) do
      if is_name(name) and (sep == "." or type(get(v, name)) == "function") then
        names[#names + 1] = name
      end
    end
  else
    if not word:match("^[%a_]?[%w_]*$") then return {} end
    partial, path, sep = word, "", ""
    for name in pairs(field_names(env, {})) do
      if is_name(name) then names[#names + 1] = name end
    end
    for k in pairs(KEYWORDS) do names[#names + 1] = k end
  end
  local found, seen = {}, {}
  for _, name in ipairs(names) do
    if not seen[name] and name:sub(1, #partial) == partial then
      seen[name] = true
      found[#found + 1] = head .. path .. sep .. name
    end
  end
  table.sort(found)
  return found
end

---------------------------------------------------------------------------------------------
-- The session: an engine and what has been reported of its runs

local FINAL = { succeeded = true, compensated = true, failed = true, needs_attention = true }

local Session = {}
Session.__index = Session

local function new_session(opts)
  local self = setmetatable({ opts = opts, runs = {}, last_run = nil }, Session)
  self.eng = mend.engine{ db = opts.db, clock = opts.clock, seed = opts.seed }
  self.t0 = self.eng:now()
  -- Runs already in the database are not news: only what happens to them from now on is.
  for _, r in ipairs(self.eng:runs{}) do
    local seen = FINAL[r.status] and -1 or #self.eng:history(r.id)
    self.runs[r.id] = { status = r.status, seen = seen }
  end
  return self
end

function Session:clock_text()
  return ("+%.3fs"):format(self.eng:now() - self.t0)
end

-- Prints the events of every run that changed since the last report, as timeline lines
-- under the run's outcome line. Returns how many events were printed.
function Session:report_news()
  local printed = 0
  local list = self.eng:runs{}
  table.sort(list, function(a, b)
    if a.created ~= b.created then return (a.created or 0) < (b.created or 0) end
    return a.id < b.id
  end)
  for _, r in ipairs(list) do
    local known = self.runs[r.id]
    if not known then
      known = { seen = 0 }
      self.runs[r.id] = known
    end
    if known.seen >= 0 or known.status ~= r.status then
      local history = self.eng:history(r.id)
      local first = math.max(known.seen, 0) + 1
      if first <= #history then
        cli.print_outcome(self.eng:status(r.id))
        cli.print_events(history, first)
        printed = printed + #history - first + 1
      end
      known.seen = FINAL[r.status] and -1 or #history
    end
    known.status = r.status
  end
  return printed
end

-- The one-line summary after the clock moved, then the news.
function Session:after(what)
  local n = self.eng:in_flight()
  out("%s: clock %s, %d run%s in flight\n", what, self:clock_text(), n, n == 1 and "" or "s")
  if self:report_news() == 0 then out("  (nothing happened)\n") end
end

local function check_virtual(self, name)
  if self.opts.clock ~= "virtual" then
    error(name .. " needs the virtual clock (mend repl --clock virtual); use run()", 0)
  end
end

local function fmt_seconds(s)
  return (("%.3f"):format(s):gsub("%.?0+$", "")) .. "s"
end

---------------------------------------------------------------------------------------------
-- The helpers in scope. Their errors carry no position: a helper typed alone is a tail call
-- of the chunk ("return advance(1)"), which leaves no line to point at.

local HELP = [[
In scope, besides Lua's own globals:
  eng                     the engine (eng:status(id), eng:history(id), eng:runs{} ... return
                          tables; see docs/lua-api.md)
  mend, json, sim         the mend module, mend.json, and mend.sim (simulated services)
  load(path)              loads a workflow file (or workflows/NAME.lua); returns its name
  start(name, input, opts)  starts a run (opts.key: run key); does what is due at once and
                          returns the run id
  advance(seconds)        virtual clock: jumps ahead, doing the work that comes due, and
                          prints what happened
  run()                   works (moving the virtual clock) until no run is in flight
  status(id)              a run and its steps (id: default the last run started)
  history(id)             a run's timeline
  runs()                  every run in the database
  dlq()                   the dead-letter queue
  breakers()              the circuit breakers
  show(value)             prints a value as a nested Lua table
  help()                  this text
  quit()                  leaves, as Ctrl-D (end of input) does
An expression typed alone prints its value; an incomplete chunk continues on the next line.
TAB completes names, `mend.` fields and `eng:` methods. Ctrl-D leaves.
With workflows/playground.lua loaded, `playground.payments` is its payment service:
playground.break_payments() and playground.fix_payments() break and fix it.
]]

function Session:helpers(env)
  local eng = self.eng

  env.eng, env.mend, env.json, env.sim = eng, mend, json, sim

  function env.load(path)
    if type(path) ~= "string" then error("load: a workflow file path expected", 0) end
    local file = path
    local f = io.open(file, "rb")
    if not f and not path:find("/", 1, true) then
      file = "workflows/" .. path .. (path:match("%.lua$") and "" or ".lua")
      f = io.open(file, "rb")
    end
    if not f then error(("load: no workflow file %s"):format(path), 0) end
    f:close()
    return eng:load(file)
  end

  function env.start(name, input, opts)
    if type(name) ~= "string" then error("start: a workflow name expected", 0) end
    if name:match("%.lua$") then name = env.load(name) end
    local id, existed = eng:start(name, input or {}, opts)
    self.last_run = id
    if existed then out("run key %s names the existing run %s\n", tostring(opts.key), id) end
    if self.opts.clock == "virtual" then
      eng:advance(0)
      self:report_news()
    end
    return id
  end

  function env.advance(seconds)
    check_virtual(self, "advance")
    seconds = seconds or 0
    if type(seconds) ~= "number" or seconds < 0 then
      error("advance: seconds must be a number >= 0", 0)
    end
    eng:advance(seconds)
    self:after("advanced " .. fmt_seconds(seconds))
  end

  function env.run()
    eng:run()
    self:after("ran until nothing was in flight")
  end

  local function run_id(id, who)
    id = id or self.last_run
    if id == nil then error(who .. ": no run id given, and no run started yet", 0) end
    local ok, st = pcall(eng.status, eng, id)
    if not (ok and st) then error(("%s: no run %s"):format(who, tostring(id)), 0) end
    return id, st
  end

  function env.status(id)
    local _, st = run_id(id, "status")
    cli.print_status(st)
  end

  function env.history(id)
    local rid, st = run_id(id, "history")
    cli.print_outcome(st)
    cli.print_timeline(eng:history(rid))
  end

  function env.runs()
    local list = eng:runs{}
    if #list == 0 then out("no runs\n") return end
    table.sort(list, function(a, b) return (a.created or 0) < (b.created or 0) end)
    for _, r in ipairs(list) do
      out("%-18s %-20s %s\n", r.id, r.workflow or "?", r.status or "?")
    end
  end

  function env.dlq() cli.print_dlq(eng:dlq()) end

  function env.breakers()
    local list = eng:breakers()
    if #list == 0 then out("no breakers yet\n") return end
    table.sort(list, function(a, b) return a.key < b.key end)
    local now = eng:now()
    for _, b in ipairs(list) do
      local line = ("%-16s %-10s failures %d  successes %d"):format(b.key, b.state,
        b.failures or 0, b.successes or 0)
      if b.state == "open" and (b.open_until or 0) > now then
        line = line .. "  half-opens in " .. fmt_seconds(b.open_until - now)
      end
      out("%s\n", line)
    end
  end

  function env.show(...)
    for i = 1, select("#", ...) do out("%s\n", M.pretty((select(i, ...)))) end
  end

  function env.help() out("%s", HELP) end

  function env.quit() self.done = true end
  env.exit = env.quit
end

---------------------------------------------------------------------------------------------
-- Reading, evaluating, printing

-- Reads one chunk with read(prompt). Returns the compiled function, nil and the chunk's text;
-- or nil, a syntax error and the text; or false for a blank line; or nothing at the end.
local function read_chunk(read, env)
  local line = read(PROMPT)
  if line == nil then return end
  if line:match("^%s*$") then return false end
  local text = line
  while true do
    -- An expression prints its values; else a statement. Either may be unfinished ("1 +",
    -- "for i = 1, 3 do"): then the next line continues it.
    local f, experr = load("return " .. text, "=stdin", "t", env)
    if f then return f, nil, text end
    local err
    f, err = load(text, "=stdin", "t", env)
    if f then return f, nil, text end
    if not (err:find("<eof>$") or experr:find("<eof>$")) then return nil, err, text end
    local more = read(PROMPT2)
    if more == nil then return nil, err, text end
    text = text .. "\n" .. more
  end
end

local function error_text(e)
  if type(e) == "string" then return e end
  if mend.is_error(e) then return tostring(e) end
  local mt = getmetatable(e)
  if mt and mt.__tostring then return tostring(e) end
  return M.pretty(e)
end

local function report_error(msg)
  io.stdout:flush()
  io.stderr:write("error: ", msg, "\n")
  io.stderr:flush()
end

local function print_results(res)
  for i = 1, res.n do out("%s\n", M.pretty(res[i])) end
end

local function handler(e)
  local msg = error_text(e)
  if os.getenv("MEND_DEBUG") then msg = debug.traceback(msg, 2) end
  return msg
end

--- Runs the shell. opts: db (default ":memory:"), clock (default "virtual"), seed.
function M.main(opts)
  opts = opts or {}
  opts.db, opts.clock = opts.db or ":memory:", opts.clock or "virtual"
  local self = new_session(opts)
  local env = setmetatable({}, { __index = _G })
  self:helpers(env)

  local interactive = mend.isatty(0) and mend.readline ~= nil
  local read
  if interactive then
    local rl = mend.readline
    rl.set_completer(function(text) return M.complete(env, text) end)
    read = rl.read
    out("mend %s, engine on %s (%s clock). help() lists the helpers; Ctrl-D leaves.\n",
        mend.version or "", opts.db, opts.clock)
  else
    read = function() return io.stdin:read("l") end
  end

  local failed = false
  while not self.done do
    local f, err, text = read_chunk(read, env)
    if f == nil and err == nil then break end                -- end of input
    if interactive and text then mend.readline.add_history(text) end
    if f then
      local res = table.pack(xpcall(f, handler))
      if res[1] then
        print_results(table.pack(table.unpack(res, 2, res.n)))
      else
        report_error(res[2])
        failed = true
      end
    elseif f == nil then
      report_error(err)
      failed = true
    end
    io.stdout:flush()
  end
  if interactive and not self.done then out("\n") end
  self.eng:close()
  return (failed and not interactive) and 1 or 0
end

return M
