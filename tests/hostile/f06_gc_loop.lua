-- expect: failed __gc is not available
local mend = require "mend"
return { name = "f06_gc_loop", steps = { { name = "s", execute = function(ctx, input)
  setmetatable({}, { __gc = function() while true do end end }); collectgarbage()
end } } }
