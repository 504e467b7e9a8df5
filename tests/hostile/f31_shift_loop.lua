-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f31_shift_loop", steps = { { name = "s", execute = function(ctx, input)
  local t = {} for i = 1, 2000000 do t[i] = i end
  while true do table.insert(t, 1, table.remove(t, 1)) end
end } } }
