-- expect: needs_attention step exceeded the memory limit
-- budget: 2000000000
local mend = require "mend"
return { name = "m01_step_hog", steps = { { name = "s", execute = function(ctx, input)
  -- Pieces of 1 MiB: what is allocated is charged to the budget too (8 bytes an
  -- instruction), and 64 MiB of small strings would cost more than the 10M of the corpus.
  local big, t = string.rep("x", 1 << 20), {}
  for i = 1, 1e8 do t[i] = big .. i end
end } } }
