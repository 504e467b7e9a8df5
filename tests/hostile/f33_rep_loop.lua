-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f33_rep_loop", steps = { { name = "s", execute = function(ctx, input)
  local s
  while true do s = string.rep("x", 16 << 20) end
end } } }
