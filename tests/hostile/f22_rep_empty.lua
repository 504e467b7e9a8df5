-- expect: succeeded "result":0
local mend = require "mend"
return { name = "f22_rep_empty", steps = { { name = "s", execute = function(ctx, input)
  return #string.rep("", 1 << 62) + #string.rep("", 1 << 62, "")
end } } }
