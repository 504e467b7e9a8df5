-- expect: failed the pattern may take up to
local mend = require "mend"
return { name = "f10_gsub_bomb", steps = { { name = "s", execute = function(ctx, input)
  return (string.rep("a", 5000)):gsub("(a-)(a-)(a-)b", "")
end } } }
