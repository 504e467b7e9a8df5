-- expect: needs_attention __tostring failed
local mend = require "mend"
return { name = "c01_tostring_raises", steps = { { name = "s", execute = function(ctx, input)
  error(setmetatable({}, { __tostring = function() error("boom") end }))
end } } }
