-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f37_load_reader", steps = { { name = "s", execute = function(ctx, input)
  local piece = "--" .. string.rep("x", 4 << 20) .. "\\n"
  while true do load(function() return piece end) end
end } } }
