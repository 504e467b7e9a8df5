-- expect: failed field 'getenv'
local mend = require "mend"
return { name = "e06_getenv", steps = { { name = "s", execute = function(ctx, input)
  return os.getenv("HOME")
end } } }
