-- expect: failed mend.sleep: a sleep of inf seconds is longer than the longest
-- A due time of inf converted to the timer's time_t as nonsense: a timer firing at once, over
-- and over, the loop spinning and run_all never returning.
local mend = require "mend"
return { name = "c19_sleep_inf", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  mend.sleep(math.huge)
end } } }
