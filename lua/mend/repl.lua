-- mend.repl: the interactive shell of `mend repl`. A client of the Lua API, as mend.cli is: it
-- holds one engine (`eng`), evaluates what is typed in an environment with a few helpers
-- (use, start, advance, run, status, history, runs, dlq, breakers, cancel, dlq_retry,
-- resolve, show, help, quit), prints returned values as nested, sorted Lua tables, and after
-- every helper that moves the engine prints what happened. Runs, timelines and lists are
-- printed by mend.render, as the `mend` command prints them. It never hides a Lua global (the workflow loader is `use`, not `load`), and its
-- errors name the user's line ("stdin:1:"), never one of its own.
--
-- On a terminal it reads lines through mend.core's readline (libedit: line editing, history
-- kept across sessions in M.history_file(), TAB completion of globals, `mend.` fields and
-- `eng:` methods); otherwise it reads stdin, with no prompt and no history, so a script can
-- be piped in and its output checked. A chunk that is incomplete (Lua's "<eof>" syntax error)
-- continues on the next line, as in lua.c.
--
-- M.main{db=, clock=, seed=} runs the shell and returns the exit code: 0, or 1 when reading
-- a script from stdin and one of its chunks failed.

local mend = require "mend"
local show = require "mend.render"   -- how runs are shown, shared with the CLI
local pages = require "mend.pages"   -- a run's history a page at a time, shared with the CLI
local sim = require "mend.sim"
local files = require "mend.cli.files"   -- how `mend start` finds a workflow by its name
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

-- A string as a Lua literal; C1 controls and the marks a terminal would obey or lay out
-- (mend.render's visible) as \u{...} escapes, which read back as the same string.
local function quote(s)
  return '"' .. show.visible((s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or ("\\%03d"):format(c:byte())
  end))) .. '"'
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

local FINAL = { succeeded = true, compensated = true, failed = true, needs_attention = true,
                resolved = true }

local Session = {}
Session.__index = Session

local function new_session(opts)
  local self = setmetatable({ opts = opts, runs = {}, last_run = nil }, Session)
  self.eng = mend.engine{ db = opts.db, clock = opts.clock, seed = opts.seed,
                          no_sandbox = opts.no_sandbox }
  self.t0 = self.eng:now()
  -- Runs already in the database are not news: only what happens to them from now on is.
  for _, r in ipairs(self.eng:runs{}) do
    local seen = FINAL[r.status] and -1 or self:last_seq(r.id)
    self.runs[r.id] = { status = r.status, seen = seen }
  end
  return self
end

-- The seq of the run's last history row (0: none), read on the history's key.
function Session:last_seq(id)
  local last = self.eng:history(id, { tail = 1 })
  return last and last[1] and last[1].seq or 0
end

-- The time of the run's first history row, which its timeline lines count from.
function Session:first_at(id)
  local first = self.eng:history(id, { limit = 1 })
  return first and first[1] and first[1].at
end

function Session:clock_text()
  return ("+%.3fs"):format(self.eng:now() - self.t0)
end

-- An ended run's events are not counted (seen = -1: nothing more is expected of it). Before an
-- operation that moves one again (dlq_retry, resolve), they are, so that only what the
-- operation adds is news.
function Session:count_seen(id)
  local ok, st = pcall(self.eng.status, self.eng, id)
  if ok and st then self.runs[id] = { status = st.status, seen = self:last_seq(id) } end
end

-- Prints the run's events after seq `after` as timeline lines, read a page at a time (only the
-- rows after the last seen, never the whole of a long history: mend.pages), calling before()
-- once first if there are any. Returns how many, and the last one's seq (`after` if none).
function Session:print_after(id, after, before)
  local t0, count = nil, 0
  local last = pages.each(self.eng, id, after, nil, function(page)
    if count == 0 and before then before() end
    t0 = t0 or (page[1].seq == 1 and page[1].at) or self:first_at(id)
    show.print_events(page, 1, t0)
    count = count + #page
  end)
  return count, last or after
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
      local n, last = self:print_after(r.id, math.max(known.seen, 0), function()
        show.print_outcome(self.eng:status(r.id))
      end)
      printed = printed + n
      known.seen = FINAL[r.status] and -1 or last
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

-- After an operation: on the virtual clock, what it made due is done at once (time does not
-- move); then the news.
function Session:settle()
  if self.opts.clock == "virtual" then self.eng:advance(0) end
  self:report_news()
end

-- Who did an operation, as the run's history records it.
function Session:who()
  if not self.who_text then
    local p = io.popen("id -un 2>/dev/null; hostname 2>/dev/null")
    local user, host = p and p:read("l"), p and p:read("l")
    if p then p:close() end
    self.who_text = ("%s@%s (mend repl)"):format(user or os.getenv("USER") or "unknown",
                                                 host or "?")
  end
  return self.who_text
end

local function check_virtual(self, name)
  if self.opts.clock ~= "virtual" then
    error(name .. " needs the virtual clock (mend repl --clock virtual); use run()", 0)
  end
end


---------------------------------------------------------------------------------------------
-- Where an error happened: the user's line, as lua.c names it ("stdin:3: ..."). A helper's
-- own errors carry no position, and an engine method's error names its caller, a line of
-- this file; both are given the position of the innermost line the user typed instead.

local THIS_FILE = debug.getinfo(1, "S").short_src
local CHUNKNAME = "=stdin"

local function user_position()
  for level = 2, 200 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.source == CHUNKNAME and info.currentline > 0 then
      return ("stdin:%d: "):format(info.currentline)
    end
  end
  return ""
end

local function this_file_prefix(msg)
  local n = #THIS_FILE
  return msg:sub(1, n + 1) == THIS_FILE .. ":" and msg:match("^:%d+: ", n + 1)
end

-- fn, with its errors placed on the user's line. Called from a chunk as `advance(1)`, the
-- chunk is still on the stack: chunks are compiled so that what is typed is never a tail call.
local function on_user_line(fn)
  return function(...)
    local res = table.pack(pcall(fn, ...))
    if res[1] then return table.unpack(res, 2, res.n) end
    local e = res[2]
    if type(e) == "string" then
      local prefix = this_file_prefix(e)
      if prefix then e = e:sub(#THIS_FILE + #prefix + 1) end
      e = user_position() .. e
    end
    error(e, 0)
  end
end

---------------------------------------------------------------------------------------------
-- The helpers in scope, and what help() says of them: a usage line, one line for the list,
-- a paragraph, and an example that works when typed in a session started as
-- `mend repl --seed 1` from the repository's root (with `id` a run of the playground).

local HELP = {
  { name = "eng", usage = "eng",
    line = "the engine (eng:status(id), eng:history(id), eng:runs{} ... return tables)",
    text = "The engine of this session, as mend.engine{} makes it (see docs/lua-api.md). Its "
      .. "methods return tables where the helpers print; the helpers are built on them.",
    example = "eng:status(id).steps[2].attempts" },
  { name = "mend", usage = "mend",
    line = "the mend module: mend.retryable, mend.fatal, mend.engine ...",
    text = "The module workflows require: typed errors (mend.retryable, mend.fatal, "
      .. "mend.compensable), mend.sleep, mend.json, mend.engine. See docs/lua-api.md.",
    example = 'mend.retryable("overloaded", { retry_after = 2 })' },
  { name = "json", usage = "json", line = "mend.json: encode and decode",
    text = "mend.json, the JSON codec the engine stores inputs and results with; json.null "
      .. "stands for JSON's null.",
    example = 'json.decode(\'{"a": [1, 2]}\')' },
  { name = "sim", usage = "sim", line = "mend.sim: simulated services",
    text = "mend.sim, the simulated services of the examples: deterministic failures, "
      .. "latency and dedupe by idempotency key (lua/mend/sim.lua says how).",
    example = 'svc = sim.service{ name = "mail", fail_first = 1 }' },
  { name = "use", usage = "use(path)",
    line = "loads a workflow file (or workflows/NAME.lua); returns its name",
    text = "Loads a workflow file into the engine and returns the workflow's name. A name "
      .. "without a slash that is not a file is looked for as workflows/NAME.lua, from the "
      .. "directory the REPL was started in. (This is the REPL's workflow loader; `load` is "
      .. "Lua's own, which compiles a chunk.)",
    example = 'use "playground"' },
  { name = "start", usage = "start(name, input, opts)",
    line = "starts a run (opts.key: run key); returns its id",
    text = "Starts a run of a loaded workflow (a NAME.lua path, or workflows/NAME.lua for a "
      .. "name not loaded yet, is loaded first; when that file declares another workflow "
      .. "and a file of workflows/ declares NAME, the start is refused naming both, as "
      .. "`mend start` does) with the input table (default {}) and returns its id; opts.key makes the start idempotent: "
      .. "the same key names the same run. On the virtual clock what is due at once is done "
      .. "and printed; advance() or run() does the rest.",
    example = 'id = start("playground", { amount = 30 }, { key = "order-1" })' },
  { name = "advance", usage = "advance(seconds)",
    line = "virtual clock: jumps ahead, doing the work that comes due; prints it",
    text = "Moves the virtual clock ahead by seconds (default 0), doing every attempt, retry, "
      .. "breaker probe and compensation that comes due on the way, and prints what happened "
      .. "to each run. Only with the virtual clock (the default of mend repl).",
    example = "advance(5)" },
  { name = "run", usage = "run()",
    line = "works (moving the virtual clock) until no run is in flight",
    text = "Works until no run is in flight, moving the virtual clock as far as needed (on the "
      .. "real clock, waiting), and prints what happened.",
    example = "run()" },
  { name = "status", usage = "status(id)",
    line = "a run and its steps (id: default the last run started)",
    text = "Prints a run's outcome, input and steps with their attempts, results and errors, "
      .. "as `mend status` does. Without an id, the last run started in this session.",
    example = "status(id)" },
  { name = "history", usage = "history(id)", line = "a run's timeline (id: as status)",
    text = "Prints a run's whole timeline: every transition with its time since the start, "
      .. "attempt, delay and error, and the operators' entries, as `mend history` does.",
    example = "history(id)" },
  { name = "runs", usage = "runs()", line = "every run in the database",
    text = "Lists every run in the database, newest first, as `mend runs` does: id, workflow, "
      .. "status, attention, when it was created and its error.",
    example = "runs()" },
  { name = "dlq", usage = "dlq()", line = "the dead-letter queue",
    text = "Prints the dead-letter queue, as `mend dlq` does: the runs that need a person, "
      .. "with why (attempts_exhausted, compensation_failed, severity_3), the step and the "
      .. "last error. dlq_retry and resolve take runs out of it.",
    example = "dlq()" },
  { name = "breakers", usage = "breakers()", line = "the circuit breakers",
    text = "Prints every circuit breaker, as `mend breakers` does: its state and counts, and when "
      .. "an open one half-opens.",
    example = "breakers()" },
  { name = "cancel", usage = "cancel(id)",
    line = "cancels a running run: the completed steps are compensated",
    text = "Cancels a running run, as `mend cancel` does: the attempt in flight is abandoned, "
      .. "the cancel is recorded with who asked, and the completed steps are compensated in "
      .. "reverse (a run with none ends failed). On the virtual clock what is due at once is "
      .. "done and printed; advance() or run() does the rest. A run that another live engine "
      .. "holds is asked to cancel instead. Refused for a run that has ended.",
    example = 'id = start("playground"); cancel(id); run()' },
  { name = "dlq_retry", usage = "dlq_retry(id)",
    line = "resumes a dead letter where it stopped, with fresh attempts",
    text = "Takes a run out of the dead-letter queue and resumes it where it stopped, as "
      .. "`mend dlq retry` does: the compensation that failed, or the step that failed with "
      .. "severity 3, with fresh attempts. Its workflow must be loaded (use). Refused for a "
      .. "run compensated after its attempts ran out: nothing is left to resume (resolve it, "
      .. "or start a new run).",
    example = "playground.fix_payments(); dlq_retry(id); run()" },
  { name = "resolve", usage = "resolve(id, note)",
    line = "a person settled a dead letter by hand: it ends resolved",
    text = "Takes a run out of the dead-letter queue because a person settled it by hand, as "
      .. "`mend dlq resolve` does: the run ends `resolved`, and the note (required: say what "
      .. "was done) is recorded in its history with who did it.",
    example = 'resolve(id, "refunded in the PSP console, ticket 4411")' },
  { name = "signal", usage = "signal(id, name, data, opts)",
    line = "sends an event to a run; a step wait_for = name takes it",
    text = "Sends event name to a running run, as `mend signal` does: a step with "
      .. "wait_for = name takes it (the oldest not taken) and data becomes its result. Sent "
      .. "before the run waits, it is kept in the run's inbox. opts.key makes it idempotent "
      .. "(the same key again is one event); with opts.run_key, id may be nil and the run is "
      .. "the one started with that key. On the virtual clock what it wakes is done and "
      .. "printed at once; a wait's timeout (timeout = 7 * 86400) passes with advance(). "
      .. "Refused for a run that has ended, compensates, or fails (a step failed for good).",
    example = 'id = start("quest", { player = 17, quest = "rats" }); '
      .. 'signal(id, "boss_killed", { gold = 50 }, { key = "kill-1" })' },
  { name = "complete", usage = "complete(token, result)",
    line = "completes a step's token; a step wait = \"token\" goes on",
    text = "Completes the token a step handed out with ctx:token(), as `mend complete` does: "
      .. "the step (wait = \"token\") succeeds with result, and its run goes on, printed at "
      .. "once on the virtual clock. A token is single use and good for the attempt that made "
      .. "it only: a token used already, of an earlier attempt, or of a run that ended is "
      .. "refused. workflows/approval.lua logs its token.",
    example = 'complete("mtk_0123456789abcdef0123456789abcdef", { by = "alice" })' },
  { name = "fail", usage = "fail(token, kind, message)",
    line = "fails a step's token: its policy handles the error",
    text = "Fails the token a step handed out, as `mend fail` does: the step fails as if its "
      .. "execute had raised an error of kind (\"retryable\": a new attempt and a new token "
      .. "while attempts remain; \"fatal\" or \"compensable\": the run compensates). Refused "
      .. "as complete is.",
    example = 'fail("mtk_0123456789abcdef0123456789abcdef", "fatal", "not eligible")' },
  { name = "show", usage = "show(value, ...)", line = "prints values as nested Lua tables",
    text = "Prints each value as an expression typed alone would: scalars as Lua literals, "
      .. "tables nested and indented, keys sorted.",
    example = "show(eng:status(id))" },
  { name = "help", usage = "help(fn)", line = "describes fn (help() lists the helpers)",
    text = "help() lists the helpers; help(fn), or help \"fn\", describes one with an example.",
    example = "help(start)" },
  { name = "quit", usage = "quit()", line = "leaves, as Ctrl-D (end of input) does",
    text = "Leaves the REPL, as Ctrl-D does; exit() is the same. The engine is closed: with "
      .. "--db, runs in flight stay in the database for a worker or a later session.",
    example = "quit()" },
}

--- What help() says of each helper, in its order: { name, usage, line, text, example }.
M.help_entries = HELP

local HELP_BY_NAME = {}
for _, h in ipairs(HELP) do HELP_BY_NAME[h.name] = h end
HELP_BY_NAME.exit = HELP_BY_NAME.quit

local function help_list()
  local lines = { "In scope, besides Lua's own globals (load among them):" }
  for _, h in ipairs(HELP) do
    local usage = h.usage
    if #usage > 22 then
      lines[#lines + 1] = "  " .. usage
      usage = ""
    end
    lines[#lines + 1] = ("  %-22s  %s"):format(usage, h.line)
  end
  lines[#lines + 1] = [[
help(fn) describes one of them with an example. An expression typed alone prints its value;
an incomplete chunk continues on the next line. TAB completes names, `mend.` fields and
`eng:` methods; Up and Down walk the history, kept across sessions in ~/.mend_history
(MEND_HISTFILE names another file; empty: none). Ctrl-C abandons the line being typed;
Ctrl-D leaves.
With workflows/playground.lua loaded (use "playground"), `playground.payments` and
`playground.shipping` are its services: playground.break_payments(),
playground.fix_payments(), playground.break_shipping() and playground.fix_shipping().
]]
  return table.concat(lines, "\n")
end

-- text in lines of at most `width` characters, each after `indent`.
local function wrap(text, indent, width)
  local lines, line = {}, nil
  for word in text:gmatch("%S+") do
    if line and #indent + #line + 1 + #word > width then
      lines[#lines + 1] = indent .. line
      line = nil
    end
    line = line and (line .. " " .. word) or word
  end
  if line then lines[#lines + 1] = indent .. line end
  return table.concat(lines, "\n")
end

local function help_text(h)
  return ("%s\n%s\nexample:\n  %s\n"):format(h.usage, wrap(h.text, "  ", WIDTH), h.example)
end

function Session:helpers(env)
  local eng = self.eng
  local f = {}      -- the helpers themselves; env gets them placed on the user's line

  env.eng, env.mend, env.json, env.sim = eng, mend, json, sim

  -- Whether path is a file that can be read: true, or nil and the system's reason (a folder
  -- opens, and says "Is a directory" only when read).
  local function readable(path)
    local fh, err = io.open(path, "rb")
    if not fh then return nil, err end
    local ok, rerr = fh:read(0)
    fh:close()
    if ok == nil and rerr then return nil, path .. ": " .. rerr end
    return true
  end

  function f.use(path)
    if type(path) ~= "string" then error("use: a workflow file path expected", 0) end
    local file = path
    local ok, why = readable(file)
    if not ok and not path:find("/", 1, true) then
      -- not a file here (none, or a folder of that name): workflows/NAME.lua, as start(NAME)
      file = "workflows/" .. path .. (path:match("%.lua$") and "" or ".lua")
      local ok2, why2 = readable(file)
      ok, why = ok2, ok2 and why or (why .. "; " .. why2)
    end
    if not ok then error(("use: no workflow file %s (%s)"):format(path, why), 0) end
    return eng:load(file)
  end

  function f.start(name, input, opts)
    if type(name) ~= "string" then error("start: a workflow name expected", 0) end
    if name:match("%.lua$") then
      name = f.use(name)
    elseif not eng:loaded_version(name) and not name:find("/", 1, true) then
      -- as `mend start NAME` finds workflows/NAME.lua: start("playground") in a fresh session
      local file = "workflows/" .. name .. ".lua"
      local fh = io.open(file, "rb")
      if fh then   -- the file, never ./NAME (a folder named so); its workflow, by its own name
        fh:close()
        local declared = eng:load(file)
        if declared ~= name then
          -- a file here that declares NAME is what a worker serves under it: as `mend start`
          local ok, e = pcall(files.refuse_named_other, eng, {}, name, file, declared)
          if not ok then
            error("start: " .. (type(e) == "table" and e.message or tostring(e)), 0)
          end
        end
        name = declared
      end
    end
    local id, existed = eng:start(name, input or {}, opts)
    self.last_run = id
    if existed then out("run key %s names the existing run %s\n", tostring(opts.key), id) end
    if self.opts.clock == "virtual" then
      eng:advance(0)
      self:report_news()
    end
    return id
  end

  function f.advance(seconds)
    check_virtual(self, "advance")
    seconds = seconds or 0
    if type(seconds) ~= "number" or not (seconds >= 0 and seconds < math.huge) then
      error("advance: seconds must be a finite number >= 0", 0)
    end
    eng:advance(seconds)
    self:after("advanced " .. show.fmt_seconds(seconds))
  end

  function f.run()
    eng:run()
    self:after("ran until nothing was in flight")
  end

  local function run_id(id, who)
    id = id or self.last_run
    if id == nil then error(who .. ": no run id given, and no run started yet", 0) end
    local st = type(id) == "string" and eng:status(id) or nil
    if not st then error(("%s: no run %s"):format(who, tostring(id)), 0) end
    return id, st
  end

  function f.status(id)
    local _, st = run_id(id, "status")
    show.print_status(st, eng:now())
  end

  function f.history(id)
    local rid, st = run_id(id, "history")
    show.print_outcome(st)
    out("timeline:\n")
    self:print_after(rid, 0)
  end

  function f.runs() show.print_runs(eng:runs{}) end

  function f.dlq() show.print_dlq(eng:dlq()) end

  function f.breakers() show.print_breakers(show.breakers_now(eng:breakers(), eng:now()), eng:now()) end

  -- The operations take the run's id always: cancelling or settling "the last run" by
  -- default would act on a run the user did not name.
  local function given_id(id, who)
    if type(id) ~= "string" then error(who .. ": a run id expected, as start() returns it", 0) end
    return id
  end

  function f.cancel(id)
    given_id(id, "cancel")
    if eng:cancel(id, { who = self:who() }) == "requested" then
      out("run %s is held by another live engine; it was asked to cancel\n", id)
    end
    self:settle()
  end

  function f.dlq_retry(id)
    given_id(id, "dlq_retry")
    self:count_seen(id)
    eng:dlq_retry(id, { who = self:who() })
    self:settle()
  end

  function f.resolve(id, note)
    given_id(id, "resolve")
    if type(note) ~= "string" or not note:find("%S") then
      error("resolve: a note saying what was done expected: resolve(id, \"refunded by hand\")", 0)
    end
    self:count_seen(id)
    eng:resolve(id, { note = note, who = self:who() })
    self:report_news()
  end

  function f.signal(id, name, data, opts)
    if opts ~= nil and type(opts) ~= "table" then error("signal: opts must be a table", 0) end
    if id == nil and not (opts and opts.run_key) then
      error("signal: a run id expected (or opts.run_key), as start() returns it", 0)
    end
    if id ~= nil then given_id(id, "signal") end
    if type(name) ~= "string" then
      error('signal: an event name expected: signal(id, "boss_killed", data)', 0)
    end
    local how, run = eng:signal(id, name, data, opts)
    if how == "duplicate" then
      out("run %s has event %s with key %s already: nothing sent\n", run, name, tostring(opts.key))
    end
    self:settle()
    return how
  end

  function f.complete(token, result)
    if type(token) ~= "string" then
      error("complete: a token expected (the text ctx:token() gave): complete(token, result)", 0)
    end
    eng:complete(token, result)
    self:settle()
  end

  function f.fail(token, kind, message)
    if type(token) ~= "string" or type(kind) ~= "string" then
      error('fail: a token and a kind expected: fail(token, "fatal", "why")', 0)
    end
    eng:fail(token, { kind = kind, message = message })
    self:settle()
  end

  function f.show(...)
    for i = 1, select("#", ...) do out("%s\n", M.pretty((select(i, ...)))) end
  end

  function f.help(what)
    if what == nil then out("%s", help_list()) return end
    local h = type(what) == "string" and HELP_BY_NAME[what]
    if not h then
      for name, entry in pairs(HELP_BY_NAME) do
        if rawequal(rawget(env, name), what) then h = entry end
      end
    end
    if h then out("%s", help_text(h)) return end
    for name, v in pairs(_G) do
      if rawequal(v, what) and type(v) == "function" then
        out("%s is Lua's own: see the Lua 5.4 manual (https://www.lua.org/manual/5.4/)\n", name)
        return
      end
    end
    error(("help: %s is not one of the REPL's helpers; help() lists them")
          :format(type(what) == "string" and what or M.pretty(what)), 0)
  end

  function f.quit() self.done = true end

  for name, fn in pairs(f) do env[name] = on_user_line(fn) end
  env.exit = env.quit
end

---------------------------------------------------------------------------------------------
-- Reading, evaluating, printing

-- Compiles what was typed. An expression is compiled as `return (...)(EXPR\n)` and called
-- with table.pack: the same values as `return EXPR`, but what EXPR calls is never a tail call
-- of the chunk, so the chunk's line is still on the stack when a helper fails in it. An
-- expression with `...` in it (the chunk's own, empty, varargs) keeps the plain form.
-- Returns the function and whether it is an expression, or nil and the error of each form.
local function compile(text, env)
  local f, experr = load("return " .. text, CHUNKNAME, "t", env)
  if f then
    if text:find("...", 1, true) then return f, false end
    local g = load("return (...)(" .. text .. "\n)", CHUNKNAME, "t", env)
    return g or f, g ~= nil
  end
  local err
  f, err = load(text, CHUNKNAME, "t", env)
  if f then return f, false end
  return nil, err, experr
end

-- Reads one chunk with read(prompt). Returns the compiled function, nil, the chunk's text and
-- whether it is an expression; or nil, a syntax error and the text; or false for a blank
-- line; or nothing at the end.
local function read_chunk(read, env)
  local line = read(PROMPT)
  if line == nil then return end
  if line == false or line:match("^%s*$") then return false end   -- false: Ctrl-C
  local text = line
  while true do
    -- An expression prints its values; else a statement. Either may be unfinished ("1 +",
    -- "for i = 1, 3 do"): then the next line continues it.
    local f, err, experr = compile(text, env)
    if f then return f, nil, text, err end
    if not (err:find("<eof>$") or experr:find("<eof>$")) then return nil, err, text end
    local more = read(PROMPT2)
    if more == false then return false end   -- Ctrl-C abandons the chunk
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
  io.stderr:write("error: ", show.visible(msg, true), "\n")
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

--- The history file: $MEND_HISTFILE (empty: none), else ~/.mend_history; nil for none.
function M.history_file()
  local path = os.getenv("MEND_HISTFILE")
  if path then return path ~= "" and path or nil end
  local home = os.getenv("HOME")
  if home and home ~= "" then return home .. "/.mend_history" end
  return nil
end

--- Runs the shell. opts: db (default ":memory:"), clock (default "virtual"), seed.
function M.main(opts)
  opts = opts or {}
  opts.db, opts.clock = opts.db or ":memory:", opts.clock or "virtual"
  local self = new_session(opts)
  local env = setmetatable({}, { __index = _G })
  self:helpers(env)

  local interactive = mend.isatty(0) and mend.readline ~= nil
  local read, histfile
  if interactive then
    local rl = mend.readline
    rl.set_completer(function(text) return M.complete(env, text) end)
    read = rl.read
    histfile = M.history_file()
    if histfile then
      local ok, err = rl.read_history(histfile)
      if not ok then
        io.stderr:write("mend: history not read: ", err, "\n")
        histfile = nil    -- writing it would replace what could not be read
      end
    end
    out("mend %s, engine on %s (%s clock). help() lists the helpers; Ctrl-D leaves.\n",
        mend.version or "", show.db_shown(opts.db), opts.clock)
  else
    read = function() return io.stdin:read("l") end
  end

  local failed = false
  while not self.done do
    local f, err, text, expr = read_chunk(read, env)
    if f == nil and err == nil then break end                -- end of input
    if interactive and text then
      mend.readline.add_history(text)
      -- Written at once, so that a session that is killed keeps what was typed in it.
      if histfile then
        local ok, werr = mend.readline.write_history(histfile)
        if not ok then
          io.stderr:write("mend: history not saved: ", werr, "\n")
          histfile = nil
        end
      end
    end
    if f then
      local ok, res
      if expr then
        ok, res = xpcall(f, handler, table.pack)
      else
        local r = table.pack(xpcall(f, handler))
        ok, res = r[1], r[2]
        if ok then res = table.pack(table.unpack(r, 2, r.n)) end
      end
      if ok then
        print_results(res)
      else
        report_error(res)
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
