-- mend.cli.inspect: the commands that only look: `mend status`, `mend history` (as lines, JSON
-- or a chart, read a page at a time), `mend runs`, `mend workflows` and `mend dlq` (the list).
-- It opens only a database that is there, changes nothing in it, never reads it by itself
-- (the Lua API does), and prints through mend.render.

local mend = require "mend"
local base = require "mend.cli.base"
local render = require "mend.render"
local json = mend.json

local out, fail, usage_error = base.out, base.fail, base.usage_error
local with_engine, existing_db, run_status = base.with_engine, base.existing_db, base.run_status
local history_page, each_page = base.history_page, base.each_page
local EXIT_OK = base.EXIT_OK
local write_json, write_list = render.write_json, render.write_list
local print_events, print_outcome = render.print_events, render.print_outcome
local print_status, print_dlq, print_runs = render.print_status, render.print_dlq, render.print_runs

local M = {}

function M.status(o, id)
  return with_engine(existing_db(o.db), function(eng)
    local st = run_status(eng, id)
    if o.json then write_json(render.nest_branches(st)) else print_status(st, eng:now()) end
    return EXIT_OK
  end)
end

-- A whole number of a page flag, written in digits and within the API's bounds (lo to hi).
local function page_flag(o, name, lo, hi, cmd)
  local v = o[name]
  if v == nil then return nil end
  local n = v:match("^%d+$") and math.tointeger(tonumber(v))
  if n and n >= lo and n <= hi then return n end
  if hi == math.maxinteger then
    usage_error(cmd or "history", "--%s must be a whole number >= %d (a seq), got %s", name, lo, v)
  end
  usage_error(cmd or "history", "--%s must be a whole number from %d to %d, got %s", name, lo, hi, v)
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
    out("%s%s", first and "[" or ",", render.encode(rows):sub(2, -2))
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
    out("%s\n", render.visible(line))
  end
end

-- Every form of the history is read in pages (--tail, --limit: one; the rest: as many as it
-- has), so that a long run costs its pages' memory, not its whole history's.
function M.history(o, id)
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
  -- as serve's since: digits, with a fraction of digits after one '.' ("5." and ".5" are not)
  local n, unit = o.since:match("^(%d+)([smhd]?)$")
  if not n then n, unit = o.since:match("^(%d+%.%d+)([smhd]?)$") end
  n = tonumber(n)
  if not n then usage_error(o._command, "--since must be like 90, 15m, 2h or 7d, got %s", o.since) end
  if unit == "" and n > 1e9 then return n end   -- already a time
  local scale = ({ [""] = 1, s = 1, m = 60, h = 3600, d = 86400 })[unit]
  return os.time() - n * scale
end

local RUN_STATUSES = { "running", "compensating", "succeeded", "compensated", "failed",
                       "needs_attention", "resolved" }

function M.runs(o)
  base.check_status(o, RUN_STATUSES, "a run's status")
  local limit = o.limit and base.whole_flag(o, "limit")
  return with_engine(existing_db(o.db), function(eng)
    local runs = eng:runs{ status = o.status, workflow = o.workflow, since = parse_since(o),
                           attention = o.attention, limit = limit or 50 }
    if o.json then write_list(runs) else print_runs(runs) end
    return EXIT_OK
  end)
end

function M.workflows(o)
  return with_engine(existing_db(o.db), function(eng)
    local list = eng:workflows(o.workflow)
    if o.json then write_list(list) else render.print_workflows(list) end
    return EXIT_OK
  end)
end

-- --limit N: the N oldest entries (a page of eng:dlq), and a line on stderr when more follow.
function M.dlq(o)
  local limit = page_flag(o, "limit", 1, mend.history_page_max, "dlq")
  return with_engine(existing_db(o.db), function(eng)
    local entries = limit and eng:dlq{ limit = limit } or eng:dlq()
    if limit and #entries == limit and #eng:dlq{ after = entries[limit], limit = 1 } > 0 then
      base.say("mend: the %d oldest dead letters shown; more follow (--limit N shows more)\n", limit)
    end
    if o.json then write_list(entries) else print_dlq(entries) end
    return EXIT_OK
  end)
end

return M
