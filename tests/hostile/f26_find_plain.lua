-- expect: failed string.find: the pattern may take up to 10^14 steps
-- budget: 100000000
local mend = require "mend"
return { name = "f26_find_plain", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("a", 1 << 24)
  return s:find(string.rep("a", 1 << 23) .. "b", 1, true)
end } } }
