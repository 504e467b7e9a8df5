-- expect: failed field 'randomseed'
local mend = require "mend"
return { name = "e23_randomseed", steps = { { name = "s", execute = function(ctx, input)
  math.randomseed(7)
end } } }
