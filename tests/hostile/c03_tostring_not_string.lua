-- expect: needs_attention __tostring failed
local mend = require "mend"
return { name = "c03_tostring_not_string", steps = { { name = "s", execute = function(ctx, input)
  error(setmetatable({}, { __tostring = function() return {} end }))
end } } }
