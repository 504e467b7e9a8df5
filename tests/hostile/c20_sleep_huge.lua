-- expect: failed ctx:sleep: a sleep of 1e+300 seconds is longer than the longest
local mend = require "mend"
return { name = "c20_sleep_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function(ctx)
  ctx:sleep(1e300)
end } } }
