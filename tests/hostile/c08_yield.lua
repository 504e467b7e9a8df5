-- expect: failed step yielded outside
local mend = require "mend"
return { name = "c08_yield", steps = { { name = "s", execute = function(ctx, input)
  coroutine.yield(1)
end } } }
