-- mend.render: how mend shows runs to people, shared by the `mend` command and the REPL:
-- times and delays, one line per history event (a renderer per event), timelines, a run's
-- outcome and status (who carries it on, when its steps are due), the dead-letter queue, runs
-- and breakers, and a database's name as it may be shown (never a password). It prints to
-- stdout and reads nothing but what it is given.

local mend = require "mend"
local columns = require "mend.columns"
local json = mend.json

-- Text of workflow code (names, errors, log lines) as a terminal shows it, not obeys it: its
-- control characters (C0, DEL and C1, as an escape sequence or a line break starts with
-- one) spelled out, so that a row stays one line and a workflow's author, who may not be the
-- operator, cannot drive the operator's terminal. So are the line and paragraph separators
-- (U+2028, U+2029: an editor or a pager breaks the row there) and the bidirectional marks,
-- embeddings, overrides and isolates (a terminal that lays text out both ways would show a
-- row's cells reordered, one name passing for another). So is a byte that is not UTF-8 (a raw
-- 0x9b is CSI on a terminal that is not UTF-8's), as the log spells it. keep_lines keeps line
-- breaks and tabs, for a message that may be a traceback.
local SPELLED = { ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function spell(c) return SPELLED[c] or ("\\x%02x"):format(c:byte()) end
local function spell_kept(c)
  if c == "\n" or c == "\t" then return c end
  return spell(c)
end
local function code_point(c) return ("\\u{%x}"):format(utf8.codepoint(c)) end
-- s with each byte that is no part of a UTF-8 character spelled out.
local function spell_bytes(s)
  local parts, i = {}, 1
  while true do
    local ok, bad = utf8.len(s, i)
    if ok then break end
    parts[#parts + 1] = s:sub(i, bad - 1)
    parts[#parts + 1] = spell(s:sub(bad, bad))
    i = bad + 1
  end
  parts[#parts + 1] = s:sub(i)
  return table.concat(parts)
end
local function visible(s, keep_lines)
  if not s:find("[%c\127\128-\255]") then return s end
  if not utf8.len(s) then s = spell_bytes(s) end
  if not s:find("[%c\127\194\216\226]") then return s end
  s = s:gsub("[%c\127]", keep_lines and spell_kept or spell)
  s = s:gsub("\194[\128-\159]", code_point)                -- C1
  s = s:gsub("\216\156", code_point)                        -- U+061C
  s = s:gsub("\226\128[\142\143\168-\174]", code_point)     -- U+200E-F, U+2028-E
  return (s:gsub("\226\129[\166-\169]", code_point))        -- U+2066-9
end

-- s in double quotes for a message, its quotes and backslashes escaped and the rest visible(),
-- so that a line break is spelled once, as "\n" (%q writes a backslash and a real line break).
local function quoted(s)
  return '"' .. visible((s:gsub('[\\"]', "\\%0"))) .. '"'
end

-- Every string it prints is visible()'s: what it prints are lines of text whose line breaks
-- are fmt's.
local function out(fmt, ...)
  local args = table.pack(...)
  for i = 1, args.n do
    if type(args[i]) == "string" then args[i] = visible(args[i]) end
  end
  io.stdout:write(fmt:format(table.unpack(args, 1, args.n)))
end

local function present(v) return v ~= nil and v ~= json.null end

-- What it prints as JSON has its objects' keys sorted: a decoded table's order is its Lua
-- state's hash order, another in each process, and two reads of one run would differ.
local SORTED = { sort_keys = true }
local function encode(v) return json.encode(v, SORTED) end

-- s padded to n columns of a terminal (mend.columns: names may be any UTF-8).
local function cell(s, n) return columns.pad(visible(tostring(s)), n) end

-- Times and delays that no clock reaches (a `sleep = 1e308` step) are printed as numbers.
local FAR = 1e12

local function fmt_seconds(s)
  if math.abs(s) >= FAR then return ("%.6gs"):format(s) end
  if math.type(s) == "integer" or s == math.floor(s) then return ("%ds"):format(s) end
  return (("%.3f"):format(s):gsub("%.?0+$", "")) .. "s"
end

local function fmt_reltime(dt)
  if math.abs(dt) >= FAR then return ("+%.6gs"):format(dt) end
  if dt < 60 then return ("+%.3fs"):format(dt) end
  if dt < 3600 then return ("+%dm%06.3fs"):format(dt // 60, dt % 60) end
  return ("+%dh%02dm%06.3fs"):format(dt // 3600, dt % 3600 // 60, dt % 60)
end

local function fmt_time(t)
  if not present(t) then return "-" end
  if math.abs(t) >= FAR * 100 then return ("%.6g (epoch seconds)"):format(t) end
  local ms = math.floor(t * 1000 + 0.5)
  return ("%s.%03d UTC"):format(os.date("!%Y-%m-%d %H:%M:%S", ms // 1000), ms % 1000)
end

local function fmt_error(e)
  if not present(e) then return nil end
  if type(e) == "table" and not mend.is_error(e) then return encode(e) end
  return tostring(e)
end

local function fmt_value(v, width)
  local ok, text = pcall(encode, v)
  text = ok and text or tostring(v)
  if width and #text > width then text = text:sub(1, width - 3) .. "..." end
  return text
end

-- What the CLI prints as JSON comes from the database, a tree, and may be larger than one
-- encoding of mend.json may be (2^20 values, a control character in a string counting as one:
-- there to stop a small table shared by many branches from standing for a huge document): a
-- list of 200k runs, a run whose map has 100k items, a step's result of a million line breaks.
-- Such a document is written as one JSON text made of encodings each well under the bound: a
-- part that fits is encoded whole, a larger or deeper table is opened and its members encoded
-- one by one, a string with too many control characters in pieces. Everything is encoded before
-- anything is printed, so that a value that cannot be encoded prints nothing but its error.
local ENCODE_MOST = 1 << 19
local STRING_PIECE = 1 << 18   -- bytes: fewer control characters than ENCODE_MOST

local function controls(s)
  return select(2, s:gsub("[%z\1-\31]", ""))
end

-- Whether mend.json would encode v within a part's bounds: at most ENCODE_MOST values as it
-- counts them, at most DEEPEST levels (its own bound is 100: a result nested 98 deep, as a
-- step may return, is deeper than that in a run's status).
local DEEPEST = 64
local function fits(v)
  local n, deep = 0, false
  local function walk(x, d)
    n = n + 1
    local t = type(x)
    if t == "string" then
      if #x > 0 then n = n + controls(x) end
    elseif t == "table" then
      if d > DEEPEST then deep = true return end
      for _, y in pairs(x) do
        if n > ENCODE_MOST or deep then return end
        walk(y, d + 1)
      end
    end
  end
  walk(v, 1)
  return n <= ENCODE_MOST and not deep
end

local function is_list(t)
  local n, keys = #t, 0
  for _ in pairs(t) do keys = keys + 1 end
  return n > 0 and keys == n
end

-- json.encode(v), its error naming where v is in the whole document.
local function encode_at(v, path)
  local ok, text = pcall(json.encode, v, SORTED)
  if ok then return text end
  local prefix = "mend.json.encode: value"
  text = tostring(text)
  if text:sub(1, #prefix) == prefix then text = "mend.json.encode: " .. path .. text:sub(#prefix + 1) end
  error(text, 0)
end

-- A string in pieces, each cut before a UTF-8 character's first byte.
local function put_string(s, acc, path)
  acc[#acc + 1] = '"'
  local i, n = 1, #s
  while i <= n do
    local j = math.min(i + STRING_PIECE - 1, n)
    while j > i and j < n and s:byte(j + 1) & 0xC0 == 0x80 do j = j - 1 end
    acc[#acc + 1] = encode_at(s:sub(i, j), path):sub(2, -2)
    i = j + 1
  end
  acc[#acc + 1] = '"'
end

local function put_value(v, acc, path)
  if fits(v) then
    acc[#acc + 1] = encode_at(v, path)
  elseif type(v) == "string" then
    put_string(v, acc, path)
  elseif is_list(v) then
    for i = 1, #v do
      acc[#acc + 1] = i == 1 and "[" or ","
      put_value(v[i], acc, ("%s[%d]"):format(path, i))
    end
    acc[#acc + 1] = "]"
  else
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)   -- as encode() sorts them
    for i, key in ipairs(keys) do
      acc[#acc + 1] = i == 1 and "{" or ","
      acc[#acc + 1] = encode_at(key, path)
      acc[#acc + 1] = ":"
      -- spelled as mend.json spells a path
      put_value(v[key], acc, key:match("^[%a_][%w_]*$") and path .. "." .. key
                             or ("%s[\"%s\"]"):format(path, key:sub(1, 64)))
    end
    acc[#acc + 1] = "}"
  end
end

local function write_json(v)
  local acc = {}
  put_value(v, acc, "value")
  acc[#acc + 1] = "\n"
  io.stdout:write(table.concat(acc))   -- JSON: its strings' control characters are escaped
end

-- A list as a JSON array (an empty Lua table would encode as an object).
local function write_list(list)
  if #list == 0 then return out("[]\n") end
  write_json(list)
end

local function transition(e)
  return ("%s -> %s"):format(e.from or "new", e.to or "?")
end

local function join(parts) return (table.concat(parts, "  "):gsub("%s+$", "")) end

-- One renderer per history event; each returns the text after the time and step columns.
local render = {
  run = function(e)
    return join({ ("%-28s"):format(transition(e)),
                  present(e.detail) and ("(" .. tostring(e.detail) .. ")") or "" })
  end,
  step = function(e)
    local parts = { ("%-28s"):format(transition(e)) }
    -- from pending: an event's name; from running: what the step started waiting for after
    -- its execute (a token, a child run)
    local waits = e.to == "waiting" and present(e.detail)
    if waits then parts[#parts + 1] = (e.from == "running" and "for " or "for event ") .. e.detail end
    if present(e.attempt) and e.attempt > 0 then parts[#parts + 1] = "attempt " .. e.attempt end
    if present(e.delay) then parts[#parts + 1] = "delay " .. fmt_seconds(e.delay) end
    if present(e.error) then parts[#parts + 1] = fmt_error(e.error) end
    if present(e.detail) and not waits then parts[#parts + 1] = "[" .. tostring(e.detail) .. "]" end   -- e.g. mend.http's requests
    return join(parts)
  end,
  breaker = function(e)
    return ("breaker %s %s"):format(e.detail or "?", transition(e))
  end,
  compensate_failed = function(e)
    local n = present(e.attempt) and e.attempt > 0 and (" " .. e.attempt) or ""
    return join({ ("compensation attempt%s failed: %s"):format(n, fmt_error(e.error) or "?"),
                  present(e.delay) and ("retry in " .. fmt_seconds(e.delay)) or "" })
  end,
  -- taken by a worker: `claimed` when no process held the run before, `recovered` when one did
  claimed = function(e) return "claimed by worker " .. (e.detail or "?") end,
  recovered = function(e) return "recovered by worker " .. (e.detail or "?") end,
  started = function(e) return "started " .. (e.detail or "") end,   -- "by WHO"
  alert = function(e)
    local ok, a = pcall(json.decode, e.detail or "")
    if ok and type(a) == "table" and a.kind then
      return join({ "alert " .. a.kind, a.reason or "", fmt_error(a.error) or "" })
    end
    return "alert: " .. (e.detail or fmt_error(e.error) or "")
  end,
  -- passed by on the way back: no compensate, or a result reused from the run that owns it
  skip_compensate = function(e)
    if not present(e.detail) or e.detail == "step has no compensate" then
      return "no compensate function: nothing to undo"
    end
    return "not compensated: " .. tostring(e.detail)
  end,
  dead_letter = function(e)
    return join({ "dead letter: " .. (e.detail or ""), fmt_error(e.error) or "" })
  end,
  log = function(e) return "log: " .. (e.detail or "") end,
  -- a completion token's outcome taken (or one of another attempt, ignored)
  token = function(e)
    return join({ "token " .. (e.detail or "outcome"), present(e.error) and fmt_error(e.error) or "" })
  end,
  child = function(e) return e.detail or "child run ended" end,   -- "child run <id> succeeded"
  when = function(e) return (e.detail or "when(ctx) answered") .. ": the step runs" end,
  map = function(e)
    local ok, list = pcall(json.decode, e.detail or "")
    return ok and type(list) == "table" and ("map over a list of %d item(s), recorded"):format(#list)
           or "map over a list, recorded"
  end,
  event = function(e)
    local ok, ev = pcall(json.decode, e.detail or "")
    if not (ok and type(ev) == "table") then return "event " .. (e.detail or "?") end
    return ("event %s consumed%s"):format(tostring(ev.name),
                                          present(ev.key) and (" (key " .. tostring(ev.key) .. ")") or "")
  end,
}

local function render_event(e)
  local r = render[e.event]
  if r then return r(e) end
  local parts = { e.event or "?" }
  if present(e.from) or present(e.to) then parts[#parts + 1] = transition(e) end
  if present(e.detail) then parts[#parts + 1] = tostring(e.detail) end
  if present(e.error) then parts[#parts + 1] = fmt_error(e.error) end
  return join(parts)
end

-- Prints history[first..] (default all) as timeline lines, times relative to t0 (default
-- history[1]'s).
local function print_events(history, first, t0)
  t0 = t0 or history[1] and history[1].at or 0
  for i = first or 1, #history do
    local e = history[i]
    if e.event == "run" and e.to == "compensating" then
      out("  ---- turning back: compensating the completed steps in reverse ----\n")
    end
    local run_level = e.event == "run" or e.event == "started"
    local who = e.step or (run_level and "(run)" or "")
    out("  %-10s %s %s\n", fmt_reltime((e.at or t0) - t0), cell(who, 16), render_event(e))
  end
end

local function print_timeline(history)
  out("timeline:\n")
  print_events(history, 1)
end

-- `alerted` says where this process sent the run's alert, when it knows.
local function print_outcome(st, alerted)
  out("%s run %s: %s\n", st.workflow or "?", st.id, st.status)
  if present(st.error) then out("  error: %s\n", fmt_error(st.error)) end
  local dead_letter = st.status == "needs_attention"
  if dead_letter or st.attention == true or st.attention == 1 then
    out("  attention: %s\n", alerted or (dead_letter and "in the dead-letter queue (mend dlq)")
                              or "flagged for a person (mend runs --attention)")
  end
end

local function unfinished(st) return st.status == "running" or st.status == "compensating" end

-- "in 12 s" or "12 s ago", from now.
local function fmt_due(due, now)
  local dt = due - now
  if math.abs(dt) >= FAR then return ("in %.6g s"):format(dt) end
  local text = dt >= 1 and ("%d s"):format(math.floor(dt + 0.5)) or dt <= -1 and ("%d s"):format(math.floor(-dt + 0.5))
               or ("%.1f s"):format(math.abs(dt))
  return dt >= 0 and "in " .. text or text .. " ago"
end

-- Who carries an unfinished run on: the live worker holding it, or nobody yet.
local function holder_line(st)
  if not unfinished(st) then return nil end
  if present(st.held_by) then return "held by worker " .. st.held_by end
  return "waiting for a worker: no live worker holds this run (start one: mend worker)"
end

local WAITS = { sleeping = true, retry_wait = true, breaker_open = true, compensating = true,
                waiting = true }

-- "b sleeping, due 2026-12-03 15:55:32.769 UTC (in 12 s)" for each step waiting for a time.
local function due_lines(st, now)
  local lines = {}
  local child_of = {}
  for _, c in ipairs(st.children or {}) do child_of[c.step] = c end
  for _, s in ipairs(st.steps or {}) do
    local what = present(s.awaits) and (" for event " .. s.awaits) or ""
    if child_of[s.name] then
      what = (" for child run %s (%s)"):format(child_of[s.name].run_id, child_of[s.name].workflow)
    elseif s.awaits == "token" then
      what = " for a token"
    end
    if unfinished(st) and WAITS[s.status] and present(s.due) then
      lines[#lines + 1] = ("%s %s%s, due %s (%s)"):format(s.name, s.status, what, fmt_time(s.due),
                                                       fmt_due(s.due, now))
    elseif unfinished(st) and s.status == "waiting" then
      lines[#lines + 1] = ("%s waiting%s, no timeout"):format(s.name, what)
    end
  end
  return lines
end

-- The status with each group's branches and each map's items nested in it as `branches` (by
-- their own names, the step's full name as `step`), as `mend status --json` gives it; the
-- engine and the store keep one flat list ("prepare/stock" right after its group, "charge/3"
-- after every step).
local function nest_branches(st)
  local names = {}
  for _, s in ipairs(st.steps or {}) do names[s.name] = s end
  local steps = {}
  for _, s in ipairs(st.steps or {}) do
    local parent, own = s.name:match("^(.*)/([^/]+)$")
    local group = parent and names[parent]
    if group and group ~= s then
      local b = {}
      for k, v in pairs(s) do b[k] = v end
      b.step, b.name = s.name, own
      group.branches = group.branches or {}
      group.branches[#group.branches + 1] = b
    else
      steps[#steps + 1] = s
    end
  end
  st.steps = steps
  return st
end

local function print_status(st, now)
  print_outcome(st)
  local rows = {
    { "key", st.key }, { "input", present(st.input) and fmt_value(st.input, 100) or nil },
    { "created", fmt_time(st.created) }, { "updated", fmt_time(st.updated) },
    -- the code that carries an unfinished run on (--json gives it for every run)
    { "version", unfinished(st) and present(st.version) and (st.version ..
                 (present(st.source) and (" (" .. st.source .. ")") or "")) or nil },
    { "worker", holder_line(st) },
    { "blocked", unfinished(st) and present(st.unavailable) and
                 ("cannot progress: " .. st.unavailable .. "; fix it, or move the run to"
                  .. " another version (mend upgrade), cancel or resolve it") or nil },
    { "cancel", st.cancel_requested == true and unfinished(st)
                and "requested; the worker that holds or next takes the run cancels it" or nil },
  }
  for _, row in ipairs(rows) do
    if present(row[2]) then out("  %-8s %s\n", row[1], row[2]) end
  end
  out("steps:\n")
  -- a group's branches and a map's items ("prepare/stock", "charge/3") are listed under it,
  -- indented
  local nested = nest_branches({ steps = st.steps })
  local rows = {}
  for n, s in ipairs(nested.steps) do
    rows[#rows + 1] = { s, ("%2d %s"):format(n, cell(s.name, 16)) }
    for _, b in ipairs(s.branches or {}) do rows[#rows + 1] = { b, ("   \u{2514} %s"):format(cell(b.name, 14)) } end
  end
  for _, row in ipairs(rows) do
    local s = row[1]
    local parts = { ("%s %-20s attempts %d"):format(row[2], s.status, s.attempts or 0) }
    if (s.comp_attempts or 0) > 0 then parts[#parts + 1] = "compensations " .. s.comp_attempts end
    if present(s.error) then parts[#parts + 1] = fmt_error(s.error) end
    if present(s.result) then parts[#parts + 1] = "result " .. fmt_value(s.result, 60) end
    -- its key's result and effect are another run's: that run compensates it
    if s.reused == true then
      parts[#parts + 1] = "reused from run " .. (present(s.reused_from) and s.reused_from or "?")
    end
    out("  %s\n", join(parts))
  end
  for _, line in ipairs(due_lines(st, now)) do out("  due: %s\n", line) end
  if present(st.parent_run) then
    out("parent:\n  %s (step %s)\n", st.parent_run, present(st.parent_step) and st.parent_step or "?")
  end
  if st.children and #st.children > 0 then
    out("children:\n")
    for _, c in ipairs(st.children) do
      out("  %s %-16s %s %s\n", cell(c.step or "?", 16), c.run_id, cell(c.workflow or "?", 18), c.status or "?")
    end
  end
end

local function fmt_age(seconds)
  if seconds < 120 then return ("%ds"):format(seconds // 1) end
  if seconds < 7200 then return ("%dm"):format(seconds // 60) end
  if seconds < 172800 then return ("%dh"):format(seconds // 3600) end
  return ("%dd"):format(seconds // 86400)
end

-- The lists mend prints (runs, workflows, dead letters, breakers): a header, then a line a row,
-- two spaces between columns. Each column but the last is padded to the widest of its title
-- and its cells, and to at least its width, in a terminal's columns (mend.columns: a name may
-- be any UTF-8, and one wider than its column widens it rather than push its own row askew);
-- a `right` one is aligned to the right. cols: { { "RUN", 16 }, { "AGE", 5, right = true },
-- { "ERROR" } }; rows: one string a column.
local function print_table(cols, rows)
  local shown = {}
  for r, row in ipairs(rows) do
    shown[r] = {}
    for i = 1, #cols do shown[r][i] = visible(tostring(row[i])) end
  end
  rows = shown
  local widths = {}
  for i = 1, #cols - 1 do
    local w = math.max(cols[i][2] or 0, columns.width(cols[i][1]))
    for _, row in ipairs(rows) do w = math.max(w, columns.width(tostring(row[i]))) end
    widths[i] = w
  end
  local function line(cells)
    local parts = {}
    for i = 1, #cols - 1 do
      local s = tostring(cells[i])
      local pad = (" "):rep(widths[i] - columns.width(s))
      parts[i] = cols[i].right and pad .. s or s .. pad
    end
    parts[#cols] = tostring(cells[#cols])
    out("%s\n", table.concat(parts, "  "))
  end
  local titles = {}
  for i, c in ipairs(cols) do titles[i] = c[1] end
  line(titles)
  for _, row in ipairs(rows) do line(row) end
end

local function print_dlq(entries)
  if #entries == 0 then
    out("the dead-letter queue is empty\n")
    return
  end
  local rows = {}
  for i, d in ipairs(entries) do
    rows[i] = { d.run_id, d.reason or "?", d.step or "-",
                fmt_age(math.max(0, os.time() - (d.at or os.time()))), fmt_error(d.error) or "" }
  end
  print_table({ { "RUN", 16 }, { "REASON", 20 }, { "STEP", 14 }, { "AGE", 5, right = true },
                { "LAST ERROR" } }, rows)
end

local function print_runs(runs)
  if #runs == 0 then
    out("no runs\n")
    return
  end
  local rows = {}
  for i, r in ipairs(runs) do
    local blocked = present(r.unavailable) and (r.status == "running" or r.status == "compensating")
    rows[i] = { r.id, r.workflow, r.status, blocked and "blocked" or r.attention == true and "yes" or "",
                fmt_time(r.created),
                blocked and ("workflow_unavailable: " .. r.unavailable) or fmt_error(r.error) or "" }
  end
  print_table({ { "RUN", 16 }, { "WORKFLOW", 18 }, { "STATUS", 16 }, { "ATTENTION", 9 },
                { "CREATED", 23 }, { "ERROR" } }, rows)
end

-- The workflows' versions, newest first (eng:workflows()): where each one's script is, and
-- which cannot carry their runs on.
local function print_workflows(list)
  if #list == 0 then
    out("no workflow versions recorded yet (a version is recorded with its first run)\n")
    return
  end
  local newest, rows = {}, {}
  for i, v in ipairs(list) do
    local sources = {}
    for _, src in ipairs(type(v.sources) == "table" and v.sources or {}) do
      if present(src) then sources[#sources + 1] = src end
    end
    local notes = {}
    if not newest[v.workflow] then newest[v.workflow] = true; notes[#notes + 1] = "newest" end
    if (v.unavailable or 0) > 0 then notes[#notes + 1] = v.unavailable .. " cannot progress" end
    if v.kept ~= true then notes[#notes + 1] = "no script kept" end
    rows[i] = { v.workflow, v.version or "-", fmt_time(v.first_seen), ("%d"):format(v.unfinished or 0),
                table.concat(sources, ", ") .. (#notes > 0 and ("  (" .. table.concat(notes, ", ") .. ")") or "") }
  end
  print_table({ { "WORKFLOW", 18 }, { "VERSION", 16 }, { "FIRST SEEN", 27 }, { "UNFINISHED", 10 },
                { "SOURCE" } }, rows)
end

-- An open breaker whose time is up lets the next call through as a probe: it is half-open,
-- whatever its row says until a worker next uses it.
local function breakers_now(list, now)
  for _, b in ipairs(list) do
    if b.state == "open" and present(b.open_until) and b.open_until <= now then b.state = "half_open" end
  end
  return list
end

-- The breakers as breakers_now gives them; an open one says when it half-opens, and how long
-- that is from now (the engine's clock: on a virtual one, the time is of that clock).
local function print_breakers(list, now)
  if #list == 0 then
    out("no breakers yet (one appears once a step using it has run)\n")
    return
  end
  local rows = {}
  for i, b in ipairs(list) do
    local until_ = "-"
    if b.state == "open" then
      until_ = fmt_time(b.open_until)
      if present(b.open_until) and b.open_until > now then
        until_ = until_ .. " (half-opens in " .. fmt_seconds(b.open_until - now) .. ")"
      end
    end
    rows[i] = { b.key, b.state, ("%d"):format(b.failures or 0), ("%d"):format(b.successes or 0), until_ }
  end
  print_table({ { "KEY", 20 }, { "STATE", 9 }, { "FAILURES", 8, right = true },
                { "SUCCESSES", 9, right = true }, { "OPEN UNTIL" } }, rows)
end

-- A database as mend may print it: a PostgreSQL URI without its password (in the user part or
-- as a parameter), which would otherwise land in terminals and logs; the server and the
-- database stay named, and libpq finds the password in PGPASSWORD or ~/.pgpass.
local function db_shown(db)
  if not db:match("^postgres") then return db end
  return (db:gsub("^(%a+://[^:/@]*):[^@/]*@", "%1@"):gsub("([?&])password=[^&]*&?", "%1"):gsub("[?&]$", ""))
end

-- s as one word of a POSIX shell's command line, for a command a hint asks the user to paste:
-- as it is when no character of it is one a shell reads specially, else in single quotes.
local function shell_word(s)
  if s ~= "" and not s:find("[^%w@%%+=:,./_-]") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

return {
  breakers_now = breakers_now,
  db_shown = db_shown,
  shell_word = shell_word,
  due_lines = due_lines,
  fmt_seconds = fmt_seconds,
  fmt_time = fmt_time,
  nest_branches = nest_branches,
  present = present,
  print_breakers = print_breakers,
  print_dlq = print_dlq,
  print_events = print_events,
  print_outcome = print_outcome,
  print_runs = print_runs,
  print_table = print_table,
  print_workflows = print_workflows,
  print_status = print_status,
  print_timeline = print_timeline,
  render_event = render_event,
  transition = transition,
  quoted = quoted,
  unfinished = unfinished,
  encode = encode,
  visible = visible,
  write_json = write_json,
  write_list = write_list,
}
