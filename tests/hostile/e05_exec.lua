-- expect: failed field 'exec'
local mend = require "mend"
return { name = "e05_exec", steps = { { name = "s", execute = function(ctx, input)
  mend.exec{ "sh", "-c", "touch " .. input.outside }
end } } }
