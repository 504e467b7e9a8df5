-- expect: failed xxxxxxxx
-- budget: 2000000000
-- mend.fatal with a message of 20 MiB: compensated as any fatal error, the message cut short.
local mend = require "mend"
return { name = "m23_fatal_message_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  error(mend.fatal(string.rep("x", 20 << 20)))
end } } }
