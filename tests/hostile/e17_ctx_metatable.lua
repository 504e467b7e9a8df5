-- expect: failed attempt to index a string value
local mend = require "mend"
return { name = "e17_ctx_metatable", steps = { { name = "s", execute = function(ctx, input)
  getmetatable(ctx).__index = function() error("boom") end
end } } }
