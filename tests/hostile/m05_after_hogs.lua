-- expect: succeeded "big":1048576
local mend = require "mend"
return { name = "m05_after_hogs", steps = { { name = "s", execute = function(ctx, input)
  return { big = #string.rep("x", 1 << 20) }
end } } }
