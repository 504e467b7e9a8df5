-- expect: failed global 'debug'
local mend = require "mend"
return { name = "e03_debug_registry", steps = { { name = "s", execute = function(ctx, input)
  debug.getregistry()
end } } }
