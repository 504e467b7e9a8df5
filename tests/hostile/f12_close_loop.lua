-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f12_close_loop", steps = { { name = "s", execute = function(ctx, input)
  while true do pcall(function() local x <close> = setmetatable({}, { __close = function() while true do end end }) end) end
end } } }
