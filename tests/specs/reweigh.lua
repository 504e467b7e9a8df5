-- reweigh.lua: tests/specs/weights.txt again from the seconds a run of the shards printed
-- ("spec time: FILE S s", spec/helper.lua under tests/specs/run.sh), read from ctest's log
-- (BUILD/Testing/Temporary/LastTest.log): the shard a line is in says its store. A file the
-- log does not time keeps its old figures; the header is kept. Prints the new file.
--
--   lua5.4 tests/specs/reweigh.lua tests/specs/weights.txt BUILD/Testing/Temporary/LastTest.log
local weights_path, log_path = arg[1], arg[2]
assert(weights_path and log_path, "usage: reweigh.lua WEIGHTS LOG")

local header, old = {}, {}
for line in io.lines(weights_path) do
  local name, sqlite, pg = line:match("^(%S+_spec%.lua)%s+(%d+)%s+(%d+)")
  if name then old[name] = { sqlite = tonumber(sqlite), pg = tonumber(pg) }
  else header[#header + 1] = line end
end

local store, timed = nil, {}
for line in io.lines(log_path) do
  local test = line:match("^%d+/%d+ Test: (%S+)")
  if test then store = test:match("^busted_specs_pg_") and "pg" or test:match("^busted_specs_%d") and "sqlite" end
  local file, s = line:match("^spec time: %S-([^/%s]+_spec%.lua) ([%d.]+) s")
  if file and store then
    timed[file] = timed[file] or {}
    timed[file][store] = math.floor(tonumber(s) + 0.5)
  end
end

local names = {}
for name in pairs(old) do names[#names + 1] = name end
for name in pairs(timed) do if not old[name] then names[#names + 1] = name end end
table.sort(names)
for _, line in ipairs(header) do print(line) end
for _, name in ipairs(names) do
  local o, t = old[name] or {}, timed[name] or {}
  print(string.format("%-32s %8d %6d", name, t.sqlite or o.sqlite or 15, t.pg or o.pg or 15))
end
