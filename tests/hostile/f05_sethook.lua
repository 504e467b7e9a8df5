-- expect: failed global 'debug'
local mend = require "mend"
return { name = "f05_sethook", steps = { { name = "s", execute = function(ctx, input)
  debug.sethook(); while true do end
end } } }
