-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f30_load_loop", steps = { { name = "s", execute = function(ctx, input)
  local src = string.rep("local a = 1 ", 1e6)
  while true do load(src) end
end } } }
