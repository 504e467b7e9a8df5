-- expect: needs_attention exceeded its instruction budget
local mend = require "mend"
return { name = "c02_tostring_loops", steps = { { name = "s", execute = function(ctx, input)
  error(setmetatable({}, { __tostring = function() while true do end end }))
end } } }
