-- expect: failed attempt to index a boolean value
local mend = require "mend"
return { name = "e15_string_metatable", steps = { { name = "s", execute = function(ctx, input)
  getmetatable("").__index.upper = function() return "pwned" end
end } } }
