-- expect: needs_attention __tostring failed
local mend = require "mend"
return { name = "m03_tostring_hog", steps = { { name = "s", execute = function(ctx, input)
  error(setmetatable({}, { __tostring = function() return string.rep("x", 400 << 20) end }))
end } } }
