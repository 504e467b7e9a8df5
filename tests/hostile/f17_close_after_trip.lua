-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f17_close_after_trip", steps = { { name = "s", execute = function(ctx, input)
  local x <close> = setmetatable({}, { __close = function() while true do end end })
  while true do end
end } } }
