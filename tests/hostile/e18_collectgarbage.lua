-- expect: failed invalid option 'stop'
local mend = require "mend"
return { name = "e18_collectgarbage", steps = { { name = "s", execute = function(ctx, input)
  collectgarbage("stop")
end } } }
