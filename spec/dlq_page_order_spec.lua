-- Review of serve25 (hostile): the dead-letter queue's keyset pages with times below -1, a time
-- of exactly -1 beside missing ones (both -1 in the page's order), huge times, and run ids that
-- sort oddly (bytewise: upper case, digits, a multibyte one). Runs on PostgreSQL too.
local H = require "spec.helper"

local function walk(eng, per)
  local out, last = {}, nil
  for _ = 1, 1000 do
    local page = eng:dlq{ limit = per, after = last }
    for _, e in ipairs(page) do out[#out + 1] = e.run_id end
    last = page[#page]
    if #page < per then break end
  end
  return out
end

describe("dlq pages", function()
  after_each(H.cleanup)

  it("walk every row once in (coalesce(at, -1), run_id) order, whatever the page size", function()
    local eng, db = H.new_engine()
    local rows = {
      { "m", "NULL" }, { "b", "-1" }, { "z", "NULL" }, { "a", "-1" }, { "c", "-5" }, { "d", "-5" },
      { "e", "-1e300" }, { "B", "NULL" }, { "10", "0" }, { "9", "0" }, { "é", "0" },
      { "y", "1e300" }, { "x", "1e300" }, { "w", "2.5" }, { "v", "2.5" }, { "u", "-0.5" },
    }
    for _, r in ipairs(rows) do
      H.sql(db, ("INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES ('%s',"
        .. " 'compensation_failed', 's', 'e', NULL, %s)"):format(r[1], r[2]))
    end
    local want = { "e", "c", "d", "B", "a", "b", "m", "z", "u", "10", "9", "é", "v", "w", "x", "y" }
    for per = 1, 17 do
      assert.are.same(want, walk(eng, per), "page size " .. per)
    end
  end)
end)
