-- shard.lua: which spec files one ctest entry of the busted specs runs. The specs of a store
-- are dealt into COUNT shards that ctest runs side by side (`make test` is ctest -j2), so
-- that no one long suite holds a core while the other waits. Must never: leave a spec file
-- out, or put one in two shards of a store.
--
--   lua5.4 tests/specs/shard.lua STORE SHARD COUNT WEIGHTS FILE...
--
-- STORE is sqlite or pg; SHARD is 1..COUNT, `server` or `check`. `server` is the PostgreSQL
-- specs that act on the test cluster's server or read the sessions of all of it, which other
-- specs beside them would disturb or be read in: their text runs `tests/pg/cluster.sh restart`,
-- `down` or `kill9`, reads pg_stat_activity or pg_stat_database or sets the role's settings
-- with ALTER ROLE (found by that, so a new one is found too; ctest
-- runs them with no other test of the cluster);
-- WEIGHTS is tests/specs/weights.txt (a spec file's seconds on each store, measured; a file
-- it does not name weighs DEFAULT); FILE... are every spec file (spec/*_spec.lua). The crash
-- harnesses (crash_spec.lua, pg_crash_spec.lua) have ctest entries of their own and are in
-- no shard. Prints the shard's files, one a line. `check` prints nothing and exits 1 if a file
-- is in no shard of STORE's COUNT or in two (each store has a count of its own: CMakeLists.txt
-- checks both).
local DEFAULT = 15
local store, shard, count, weights_path = arg[1], arg[2], tonumber(arg[3]), arg[4]
local files = table.move(arg, 5, #arg, 1, {})
assert(store == "sqlite" or store == "pg", "shard.lua: STORE is sqlite or pg")
assert(count and count >= 1, "shard.lua: COUNT is a number, 1 or more")

local weight = {}
for line in io.lines(weights_path) do
  local name, sqlite, pg = line:match("^(%S+_spec%.lua)%s+(%d+)%s+(%d+)")
  if name then weight[name] = { sqlite = tonumber(sqlite), pg = tonumber(pg) } end
end

local function base(path) return path:match("([^/]+)$") end
-- the two harnesses CMakeLists.txt names, exactly: another file whose name ends so is a spec
local function crash(path)
  return base(path) == "crash_spec.lua" or base(path) == "pg_crash_spec.lua"
end
local function needs_the_server_alone(path)
  local f = assert(io.open(path, "r"))
  local text = f:read("a")
  f:close()
  -- ALTER ROLE: a setting of the role every shard's sessions log in as, while it lasts
  for _, word in ipairs { "cluster.sh restart", "cluster.sh down", "cluster.sh kill9",
                          "pg_stat_activity", "pg_stat_database", "ALTER ROLE" } do
    if text:find(word, 1, true) then return true end
  end
  return false
end

-- Longest first, each to the shard that has the least so far: the shards end close together.
local function deal(st)
  local list, server = {}, {}
  for _, path in ipairs(files) do
    if not crash(path) then
      if st == "pg" and needs_the_server_alone(path) then server[#server + 1] = path
      else list[#list + 1] = path end
    end
  end
  local function w(path) local e = weight[base(path)]; return e and e[st] or DEFAULT end
  table.sort(list, function(a, b)
    if w(a) ~= w(b) then return w(a) > w(b) end
    return a < b
  end)
  local shards, load = {}, {}
  for i = 1, count do shards[i], load[i] = {}, 0 end
  for _, path in ipairs(list) do
    local least = 1
    for i = 2, count do if load[i] < load[least] then least = i end end
    table.insert(shards[least], path)
    load[least] = load[least] + w(path)
  end
  shards.server = server
  return shards
end

if shard == "check" then
  local ok, seen, shards = true, {}, deal(store)
  local keys = { "server" }
  for i = 1, count do keys[#keys + 1] = i end
  for _, key in ipairs(keys) do
    for _, path in ipairs(shards[key]) do
      if seen[path] then ok = false; io.stderr:write(store, ": ", path, " is in two shards\n") end
      seen[path] = true
    end
  end
  for _, path in ipairs(files) do
    if not crash(path) and not seen[path] then
      ok = false
      io.stderr:write(store, ": ", path, " is in no shard\n")
    end
  end
  os.exit(ok and 0 or 1)
end

local shards = deal(store)
for _, path in ipairs(shards[tonumber(shard) or shard] or {}) do print(path) end
