-- expect: failed nesting deeper
-- budget: 100000000
local mend = require "mend"
return { name = "c07_deep_result", steps = { { name = "s", execute = function(ctx, input)
  local t = {}; local c = t; for i = 1, 1e5 do c[1] = {}; c = c[1] end; return t
end } } }
