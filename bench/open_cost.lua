-- bench/open_cost.lua [N] [PG_URI]: what an engine's open costs, as every `mend` command and
-- every embedded host pays it: `mend.engine{db = ...}` then `eng:close()`, N times each (default
-- 20), the wall time's p50 and p90 in ms, on SQLite (`:memory:`, a new file) and, given a URI
-- (or MEND_TEST_PG, as tests/pg/cluster.sh run sets it), on PostgreSQL (a fresh schema each
-- open, which creates the tables, and one schema opened again, which only reads them). The
-- schemas are made before the clock starts and dropped after. Wall time moves with the
-- machine's load: say the load with a figure.
local mend = require("mend")
local now = require("system").gettime   -- luasystem, which busted brings

local n = tonumber(arg[1]) or 20
local uri = arg[2] or os.getenv("MEND_TEST_PG")

local function psql(sql)
  local ok = os.execute("PGOPTIONS='-c client_min_messages=warning' psql -X -q"
                        .. " -v ON_ERROR_STOP=1 '" .. uri .. "' -c '" .. sql .. "' >/dev/null")
  assert(ok, "psql failed: " .. sql)
end

local function in_schema(s)
  return uri .. (uri:find("?", 1, true) and "&" or "?") .. "options=-csearch_path%3D" .. s
end

local function cost(name, db_of)
  local open, close = {}, {}
  for i = 1, n do
    local db = db_of(i)
    local a = now()
    local eng = mend.engine{ db = db }
    local b = now()
    eng:close()
    open[i], close[i] = (b - a) * 1000, (now() - b) * 1000
  end
  table.sort(open)
  table.sort(close)
  local function at(t, q) return t[math.max(1, math.ceil(#t * q))] end
  print(string.format("%-22s open p50 %7.2f ms  p90 %7.2f ms   close p50 %6.2f ms  (n=%d)",
                      name, at(open, 0.5), at(open, 0.9), at(close, 0.5), n))
end

local tmp = os.tmpname()
os.remove(tmp)
cost("sqlite :memory:", function() return ":memory:" end)
cost("sqlite new file", function(i)
  local f = tmp .. "-" .. i .. ".db"
  for _, x in ipairs({ "", "-wal", "-shm" }) do os.remove(f .. x) end
  return f
end)
for i = 1, n do
  for _, x in ipairs({ "", "-wal", "-shm" }) do os.remove(tmp .. "-" .. i .. ".db" .. x) end
end
if not uri then
  print("postgres: no URI (give one, or run under tests/pg/cluster.sh run)")
  return
end
local tag = "open_cost_" .. os.time() .. "_" .. math.random(1e6)
local made = {}
for i = 0, n do made[#made + 1] = "CREATE SCHEMA " .. tag .. "_" .. i end
psql(table.concat(made, "; "))
cost("postgres fresh schema", function(i) return in_schema(tag .. "_" .. i) end)
cost("postgres schema again", function() return in_schema(tag .. "_0") end)
local dropped = {}
for i = 0, n do dropped[#dropped + 1] = "DROP SCHEMA " .. tag .. "_" .. i .. " CASCADE" end
psql(table.concat(dropped, "; "))
