-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f03_coroutine_wrap", steps = { { name = "s", execute = function(ctx, input)
  coroutine.wrap(function() while true do end end)()
end } } }
