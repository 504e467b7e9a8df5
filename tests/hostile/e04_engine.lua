-- expect: failed field 'engine'
local mend = require "mend"
return { name = "e04_engine", steps = { { name = "s", execute = function(ctx, input)
  local e = mend.engine{ db = input.outside }
end } } }
