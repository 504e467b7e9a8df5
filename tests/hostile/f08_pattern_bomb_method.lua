-- expect: failed the pattern may take up to
local mend = require "mend"
return { name = "f08_pattern_bomb_method", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("a", 5000); return s:match(".-.-.-.-.-.-b")
end } } }
