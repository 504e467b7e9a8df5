-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f32_utf8_len_loop", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("x", 16 << 20)
  while true do utf8.len(s); s:byte(1, 100000) end
end } } }
