-- expect: needs_attention step exceeded the memory limit
local mend = require "mend"
return { name = "m01_step_hog", steps = { { name = "s", execute = function(ctx, input)
  local t = {}; for i = 1, 1e8 do t[i] = string.rep("x", 64) .. i end
end } } }
