-- expect: needs_attention step exceeded the memory limit
local mend = require "mend"
return { name = "m02_rep_huge", steps = { { name = "s", execute = function(ctx, input)
  return #string.rep("x", 1 << 30)
end } } }
