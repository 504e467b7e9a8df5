-- mend.columns: how many columns of a terminal a name takes, for the tables and charts the
-- command prints. A name of workflow code (a workflow, a step, a breaker key) may be any UTF-8:
-- string.format's %-Ns pads by bytes, a combining mark takes no column and a CJK character
-- two, and a name cut by bytes may end in half a character. Must never: change the text it
-- measures beyond cutting it at a character's edge.

local M = {}

-- Columns a code point takes: combining marks none, East Asian wide and fullwidth forms two
-- (the common blocks, not every table of Unicode's: enough for names).
local function columns_of(c)
  if (c >= 0x300 and c <= 0x36F) or (c >= 0x1AB0 and c <= 0x1AFF) or (c >= 0x1DC0 and c <= 0x1DFF)
     or (c >= 0x20D0 and c <= 0x20FF) or (c >= 0xFE20 and c <= 0xFE2F) or c == 0x200B
     or c == 0x200D then
    return 0
  end
  if (c >= 0x1100 and c <= 0x115F) or (c >= 0x2E80 and c <= 0x303E) or (c >= 0x3041 and c <= 0xA4CF)
     or (c >= 0xAC00 and c <= 0xD7A3) or (c >= 0xF900 and c <= 0xFAFF) or (c >= 0xFE30 and c <= 0xFE4F)
     or (c >= 0xFF00 and c <= 0xFF60) or (c >= 0xFFE0 and c <= 0xFFE6)
     or (c >= 0x1F300 and c <= 0x1F64F) or (c >= 0x1F900 and c <= 0x1F9FF)
     or (c >= 0x20000 and c <= 0x3FFFD) then
    return 2
  end
  return 1
end

-- The columns s takes (its bytes, if it is not UTF-8).
function M.width(s)
  if not utf8.len(s) then return #s end
  local w = 0
  for _, c in utf8.codes(s) do w = w + columns_of(c) end
  return w
end

-- s cut to at most n columns, at a character's edge (a mark stays with its letter).
function M.cut(s, n)
  if not utf8.len(s) then return s:sub(1, n) end
  local w = 0
  for at, c in utf8.codes(s) do
    local cw = columns_of(c)
    if w + cw > n then return s:sub(1, at - 1) end
    w = w + cw
  end
  return s
end

-- s padded with spaces to n columns (as it is when it takes n or more).
function M.pad(s, n)
  local w = M.width(s)
  return w >= n and s or s .. (" "):rep(n - w)
end

return M
