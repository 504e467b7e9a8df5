-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f09_pattern_loop", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("a", 2000)
  while true do s:find(".-b") end
end } } }
