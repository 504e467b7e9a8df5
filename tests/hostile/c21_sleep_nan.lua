-- expect: succeeded "slept":true
-- NaN and negative waits are no wait at all; an endless step timeout is no bound.
local mend = require "mend"
return { name = "c21_sleep_nan", steps = { { name = "s", timeout = math.huge, execute = function(ctx)
  mend.sleep(0/0); mend.sleep(-1); mend.sleep(-math.huge); ctx:sleep(0/0); mend.sleep(0.01)
  return { slept = true }
end } } }
