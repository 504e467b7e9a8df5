-- mend.pages: a run's history read a page at a time (eng:history's pages of mend.history_page
-- rows), for the CLI and the REPL, so that what a reader keeps is its own and never the whole
-- of a long history. Reads only through the engine it is given; prints nothing.

local mend = require "mend"

local M = {}

-- Calls each(page) with the run's rows after seq `after` up to seq `upto` (all if nil), in
-- order, a page at a time. Returns the last row's seq (`after` if there was none), or nil and
-- the engine's message when there is no such run.
function M.each(eng, id, after, upto, each)
  local n = mend.history_page
  repeat
    local page, err = eng:history(id, { after = after, limit = n })
    if not page then return nil, err end
    local full = #page == n
    while upto and page[#page] and page[#page].seq > upto do
      page[#page] = nil
      full = false
    end
    if #page > 0 then
      each(page)
      after = page[#page].seq
    end
  until not full
  return after
end

return M
