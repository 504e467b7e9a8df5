-- expect: failed "reason":"fatal"
local mend = require "mend"
return { name = "c05_returned_error_hostile", steps = { { name = "s", execute = function(ctx, input)
  local e = mend.fatal("x"); rawset(e, "message", setmetatable({}, { __tostring = function() while true do end end })); error(e)
end } } }
