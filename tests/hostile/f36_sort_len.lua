-- expect: failed table.sort: a table with a __len metamethod
-- budget: 100000000
local mend = require "mend"
return { name = "f36_sort_len", steps = { { name = "s", execute = function(ctx, input)
  local big = {} for i = 1, 1.5e6 do big[i] = -i end
  local t = setmetatable({}, { __index = big, __newindex = big, __len = function() return #big end })
  while true do table.sort(t) end
end } } }
