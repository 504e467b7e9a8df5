-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f02_xpcall_handler", steps = { { name = "s", execute = function(ctx, input)
  while true do xpcall(function() while true do end end, function(e) while true do end end) end
end } } }
