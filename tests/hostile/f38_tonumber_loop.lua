-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f38_tonumber_loop", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("1", 16 << 20)
  while true do tonumber(s) end
end } } }
