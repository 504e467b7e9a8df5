-- bench/dlq_page.lua DB N: the time of a dead-letter page with N rows in the queue (run by
-- bench/dlq_page.sh, which says what it measures).
local mend = require "mend"
local db, n = arg[1], tonumber(arg[2])
local pg = db:match("^postgres") ~= nil

local function sql(q)
  local cmd = pg and ("psql -X -q -A -t -v ON_ERROR_STOP=1 '%s' -c \"%s\""):format(db, q)
                 or ("sqlite3 -batch '%s' \"%s\""):format(db, q)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  assert(p:close(), "failed: " .. q)
  return out
end

local now = require("system").gettime   -- luasystem, which busted brings

local eng = mend.engine{ db = db }
sql(("INSERT INTO dlq(run_id, reason, step, error, detail, at)"
  .. " WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d)"
  .. " SELECT 'r' || (1000000 + i), 'compensation_failed', 'charge', 'retryable: down', NULL,"
  .. " 1.7e9 + i * 0.5 FROM c"):format(n))
if pg then sql("ANALYZE dlq") end

local mid = eng:dlq{ limit = 1, after = { run_id = "r" .. (1000000 + n // 2), at = 1.7e9 + (n // 2) * 0.5 } }
assert(#mid == 1)

local function median(f)
  local t = {}
  for i = 1, 21 do
    local w0 = now()
    f()
    t[i] = (now() - w0) * 1000
  end
  table.sort(t)
  return t[11]
end

local first = median(function() assert(#eng:dlq{ limit = 50 } == 50) end)
local deep = median(function() assert(#eng:dlq{ limit = 50, after = mid[1] } == 50) end)
print(("dlq page of 50 with %d parked: first %.2f ms, from halfway %.2f ms (median of 21)")
  :format(n, first, deep))
eng:close()
