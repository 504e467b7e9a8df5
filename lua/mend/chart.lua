-- mend.chart: a run's timeline as bars in the terminal (`mend history RUN --chart`), the
-- picture the dashboard draws (ui/index.html): one lane per step, a mark for each attempt and
-- each wait, from the run's history alone. Holds no state and reads nothing but what it is
-- given; it keeps a run's lanes and columns, never its rows.

local columns = require "mend.columns"

local M = {}

-- The statuses worth a bar, and the character of each. An attempt is drawn by how it ended.
local GLYPH = { retry_wait = "~", breaker_open = "B", sleeping = ".", waiting = "e" }
local ATTEMPT_OK, ATTEMPT_FAILED, COMPENSATION, COMPENSATION_FAILED = "#", "x", "c", "X"
-- Which mark wins a column two segments share: what happened over what was waited.
local RANK = { [ATTEMPT_FAILED] = 6, [COMPENSATION_FAILED] = 6, [ATTEMPT_OK] = 5,
               [COMPENSATION] = 4, B = 3, ["~"] = 2, e = 2, ["."] = 1, [">"] = 5 }

local ENDED = { succeeded = true, compensated = true, failed = true, needs_attention = true,
                resolved = true }

-- Calls seg({step, kind, from, to, outcome}) for each span of a step's life in a status worth a
-- bar, as `rows(f)` gives the history's rows to f in order; an unfinished span ends at t_end
-- (outcome "open"). Keeps each step's last status, never the rows. Returns the lanes: the run's
-- steps, then the others the history names, in order.
local function each_segment(run, rows, t_end, seg)
  local lanes, seen, state = {}, {}, {}
  for _, s in ipairs(run.steps or {}) do
    lanes[#lanes + 1] = s.name
    seen[s.name] = true
  end
  rows(function(h)
    if h.event == "step" and h.step then
      if not seen[h.step] then lanes[#lanes + 1], seen[h.step] = h.step, true end
      local st = state[h.step]
      if st and (GLYPH[st.status] or st.status == "running" or st.status == "compensating") then
        seg{ step = h.step, kind = st.status, from = st.since, to = h.at, outcome = h.to }
      end
      state[h.step] = { status = h.to, since = h.at }
    end
  end)
  for _, step in ipairs(lanes) do
    local st = state[step]
    if st and (GLYPH[st.status] or st.status == "running" or st.status == "compensating") then
      seg{ step = step, kind = st.status, from = st.since, to = t_end, outcome = "open" }
    end
  end
  return lanes
end

-- The chart's time axis: from the first row to the last (to `now`, for a run not ended).
local function axis(run, first, last, now)
  local t_last = last and last.at
  local t_end = ENDED[run.status] and t_last or math.max(t_last or 0, now or t_last or 0)
  return first and first.at or 0, t_end or 0
end

-- Yields the history's rows of a list, in order.
local function of_list(history)
  return function(f) for _, h in ipairs(history) do f(h) end end
end

local function glyph(seg)
  if seg.kind == "running" then
    if seg.outcome == "open" then return ">" end
    return seg.outcome == "succeeded" and ATTEMPT_OK or ATTEMPT_FAILED
  elseif seg.kind == "compensating" then
    return (seg.outcome == "compensated" or seg.outcome == "open") and COMPENSATION or COMPENSATION_FAILED
  end
  return GLYPH[seg.kind]
end

local function secs(d)
  if d < 1 then return ("%.0f ms"):format(d * 1000) end
  if d < 120 then return ("%.2f s"):format(d) end
  return ("%.1f min"):format(d / 60)
end

-- The chart's lines, `width` columns of bars after the lane names, of a run whose history is
-- the list `history`, or given by `history(f)`, which calls f with each row in order, `first`
-- and `last` being its first and last row: drawn as the rows come, holding its columns and
-- never the rows, so that a long history can be read in pages.
function M.lines(run, history, now, width, first, last)
  width = width or 60
  if type(history) == "table" then
    first, last, history = history[1], history[#history], of_list(history)
  end
  local t0, t1 = axis(run, first, last, now)
  local span = math.max(t1 - t0, 1e-9)
  local rows = {}
  local function row_of(lane)
    local row = rows[lane]
    if not row then
      row = {}
      for c = 1, width do row[c] = " " end
      rows[lane] = row
    end
    return row
  end
  local lanes = each_segment(run, history, t1, function(s)
    local row, g = row_of(s.step), glyph(s)
    local a = math.floor((s.from - t0) / span * (width - 1)) + 1
    local b = math.max(a, math.floor((s.to - t0) / span * (width - 1)) + 1)
    -- An attempt is marked where it ends (its outcome); a wait covers its whole span.
    if s.kind == "running" or s.kind == "compensating" then a = b end
    for c = a, b do
      if (RANK[g] or 0) >= (RANK[row[c]] or 0) then row[c] = g end
    end
  end)
  local name_w = 8
  for _, l in ipairs(lanes) do name_w = math.max(name_w, math.min(columns.width(l), 24)) end
  local out = {}
  local right = "+" .. secs(span)
  out[#out + 1] = (" "):rep(name_w + 3) .. "0" .. (" "):rep(math.max(1, width - #right)) .. right
  for _, l in ipairs(lanes) do
    out[#out + 1] = ("%s  |%s|"):format(columns.pad(columns.cut(l, 24), name_w), table.concat(row_of(l)))
  end
  local pad = (" "):rep(name_w + 3)
  out[#out + 1] = pad .. "# attempt ok  x attempt failed  > attempt running  ~ retry wait  B breaker wait"
  out[#out + 1] = pad .. ". sleep  e event wait  c compensation  X compensation failed"
  return out
end

return M
