-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f20_close_added_late", steps = { { name = "s", execute = function(ctx, input)
  local mt = { __close = true }
  local x <close> = setmetatable({}, mt)
  mt.__close = function() while true do end end
  while true do end
end } } }
