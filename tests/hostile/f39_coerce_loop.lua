-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f39_coerce_loop", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("1", 16 << 20)
  while true do local x = s + 0 end
end } } }
