-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f29_gc_loop", steps = { { name = "s", execute = function(ctx, input)
  local keep = {} for i = 1, 200000 do keep[i] = { i } end
  while true do collectgarbage() end
end } } }
