-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f35_concat_empty_loop", steps = { { name = "s", execute = function(ctx, input)
  local t = {} for i = 1, 1.5e6 do t[i] = "" end
  while true do table.concat(t) end
end } } }
