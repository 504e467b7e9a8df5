-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f04_coroutine_catch", steps = { { name = "s", execute = function(ctx, input)
  while true do coroutine.resume(coroutine.create(function() while true do end end)) end
end } } }
