-- expect: failed global 'loadfile'
local mend = require "mend"
return { name = "e09_loadfile", steps = { { name = "s", execute = function(ctx, input)
  loadfile("/etc/passwd")
end } } }
