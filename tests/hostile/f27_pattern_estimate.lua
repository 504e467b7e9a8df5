-- expect: failed the pattern has too many repetitions
-- budget: 100000000
local mend = require "mend"
return { name = "f27_pattern_estimate", steps = { { name = "s", execute = function(ctx, input)
  return string.rep("b", 30 << 20):find("^" .. string.rep("a*", 3000))
end } } }
