-- expect: succeeded "sim":true
local mend = require "mend"
return { name = "e21_require_mend_sim", steps = { { name = "s", execute = function(ctx, input)
  local sim = require "mend.sim"
  return { sim = type(sim) == "table" }
end } } }
