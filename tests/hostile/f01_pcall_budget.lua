-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f01_pcall_budget", steps = { { name = "s", execute = function(ctx, input)
  while true do pcall(function() while true do end end) end
end } } }
