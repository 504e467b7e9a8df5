-- expect: failed field 'listdir'
local mend = require "mend"
return { name = "e07_listdir", steps = { { name = "s", execute = function(ctx, input)
  return mend.listdir("/")
end } } }
