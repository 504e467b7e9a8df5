-- expect: failed result is not JSON-compatible
local mend = require "mend"
return { name = "c06_cyclic_result", steps = { { name = "s", execute = function(ctx, input)
  local t = {}; t.t = t; return t
end } } }
