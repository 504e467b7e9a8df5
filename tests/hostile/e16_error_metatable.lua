-- expect: failed attempt to index a string value
local mend = require "mend"
return { name = "e16_error_metatable", steps = { { name = "s", execute = function(ctx, input)
  getmetatable(mend.fatal("x")).__index = function() error("boom") end
end } } }
