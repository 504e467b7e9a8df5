-- mend.chart: a run's timeline as bars in the terminal (`mend history RUN --chart`), the
-- picture the dashboard draws (ui/index.html): one lane per step, a mark for each attempt and
-- each wait, from the run's history alone. Holds no state and reads nothing but what it is
-- given.

local M = {}

-- The statuses worth a bar, and the character of each. An attempt is drawn by how it ended.
local GLYPH = { retry_wait = "~", breaker_open = "B", sleeping = ".", waiting = "e" }
local ATTEMPT_OK, ATTEMPT_FAILED, COMPENSATION, COMPENSATION_FAILED = "#", "x", "c", "X"
-- Which mark wins a column two segments share: what happened over what was waited.
local RANK = { [ATTEMPT_FAILED] = 6, [COMPENSATION_FAILED] = 6, [ATTEMPT_OK] = 5,
               [COMPENSATION] = 4, B = 3, ["~"] = 2, e = 2, ["."] = 1, [">"] = 5 }

local ENDED = { succeeded = true, compensated = true, failed = true, needs_attention = true,
                resolved = true }

-- The spans of each step's life in a status worth a bar: {step, kind, from, to, outcome}.
-- An unfinished span ends at `now` (outcome "open").
function M.segments(run, history, now)
  local lanes, seen, state, segs = {}, {}, {}, {}
  for _, s in ipairs(run.steps or {}) do
    lanes[#lanes + 1] = s.name
    seen[s.name] = true
  end
  local t0, t_last
  for _, h in ipairs(history) do
    t0 = t0 or h.at
    t_last = h.at
    if h.event == "step" and h.step then
      if not seen[h.step] then lanes[#lanes + 1], seen[h.step] = h.step, true end
      local st = state[h.step]
      if st and (GLYPH[st.status] or st.status == "running" or st.status == "compensating") then
        segs[#segs + 1] = { step = h.step, kind = st.status, from = st.since, to = h.at, outcome = h.to }
      end
      state[h.step] = { status = h.to, since = h.at }
    end
  end
  local t_end = ENDED[run.status] and t_last or math.max(t_last or 0, now or t_last or 0)
  for _, step in ipairs(lanes) do
    local st = state[step]
    if st and (GLYPH[st.status] or st.status == "running" or st.status == "compensating") then
      segs[#segs + 1] = { step = step, kind = st.status, from = st.since, to = t_end, outcome = "open" }
    end
  end
  return { lanes = lanes, segs = segs, t0 = t0 or 0, t1 = t_end or 0 }
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

-- The chart's lines, `width` columns of bars after the lane names.
function M.lines(run, history, now, width)
  width = width or 60
  local tl = M.segments(run, history, now)
  local name_w = 8
  for _, l in ipairs(tl.lanes) do name_w = math.max(name_w, math.min(#l, 24)) end
  local span = math.max(tl.t1 - tl.t0, 1e-9)
  local rows = {}
  for i = 1, #tl.lanes do
    rows[tl.lanes[i]] = {}
    for c = 1, width do rows[tl.lanes[i]][c] = " " end
  end
  for _, s in ipairs(tl.segs) do
    local row, g = rows[s.step], glyph(s)
    local a = math.floor((s.from - tl.t0) / span * (width - 1)) + 1
    local b = math.max(a, math.floor((s.to - tl.t0) / span * (width - 1)) + 1)
    -- An attempt is marked where it ends (its outcome); a wait covers its whole span.
    if s.kind == "running" or s.kind == "compensating" then a = b end
    for c = a, b do
      if (RANK[g] or 0) >= (RANK[row[c]] or 0) then row[c] = g end
    end
  end
  local out = {}
  local right = "+" .. secs(span)
  out[#out + 1] = (" "):rep(name_w + 3) .. "0" .. (" "):rep(math.max(1, width - #right)) .. right
  for _, l in ipairs(tl.lanes) do
    out[#out + 1] = ("%-" .. name_w .. "s  |%s|"):format(l:sub(1, 24), table.concat(rows[l]))
  end
  local pad = (" "):rep(name_w + 3)
  out[#out + 1] = pad .. "# attempt ok  x attempt failed  > attempt running  ~ retry wait  B breaker wait"
  out[#out + 1] = pad .. ". sleep  e event wait  c compensation  X compensation failed"
  return out
end

return M
