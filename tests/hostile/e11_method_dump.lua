-- expect: failed method 'dump'
local mend = require "mend"
return { name = "e11_method_dump", steps = { { name = "s", execute = function(ctx, input)
  return ("x"):dump()
end } } }
