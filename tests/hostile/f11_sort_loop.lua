-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f11_sort_loop", steps = { { name = "s", execute = function(ctx, input)
  local t = {}; for i = 1, 100000 do t[i] = -i end
  while true do table.sort(t) end
end } } }
