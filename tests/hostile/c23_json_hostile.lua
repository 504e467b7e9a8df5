-- expect: succeeded "done":true
-- budget: 100000000
-- mend.json of cycles, of values whose metamethods raise, of 100k-deep nesting: errors, no crash.
local mend = require "mend"
return { name = "c23_json_hostile", steps = { { name = "s", execute = function()
  local cyc = {}; cyc.me = cyc
  assert(not pcall(mend.json.encode, cyc))
  local p = setmetatable({}, { __pairs = function() error("pairs") end, __index = function() error("idx") end, __len = function() error("len") end })
  pcall(mend.json.encode, p)
  local deep = {}
  local cur = deep
  for i = 1, 100000 do cur[1] = {}; cur = cur[1] end
  assert(not pcall(mend.json.encode, deep))
  assert(not pcall(mend.json.decode, string.rep("[", 100000)))
  return { done = true }
end } } }
