-- expect: failed the pattern may take up to
local mend = require "mend"
return { name = "f07_pattern_bomb", steps = { { name = "s", execute = function(ctx, input)
  return string.find(string.rep("a", 5000), ".-.-.-.-.-.-b")
end } } }
