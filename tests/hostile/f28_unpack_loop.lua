-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f28_unpack_loop", steps = { { name = "s", execute = function(ctx, input)
  local t = {} for i = 1, 900000 do t[i] = i end
  while true do select("#", table.unpack(t)) end
end } } }
