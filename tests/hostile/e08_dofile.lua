-- expect: failed global 'dofile'
local mend = require "mend"
return { name = "e08_dofile", steps = { { name = "s", execute = function(ctx, input)
  dofile("/etc/passwd")
end } } }
