-- expect: failed global 'io'
local mend = require "mend"
return { name = "e22_write_through_load_env", steps = { { name = "s", execute = function(ctx, input)
  load("io.open(...,\"w\")")(input.outside)
end } } }
