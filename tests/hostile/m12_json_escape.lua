-- expect: failed a control character in a string
-- holds: budget
-- budget: 100000000
-- mend.json.encode of 20 MiB of control characters: jansson writes each as \uXXXX with a call
-- to snprintf, 4 s in one C call that no hook or watchdog stops, 120 MB outside the memory
-- limit. Each counts as a value now, and the encoding stops at the 1M values' bound.
local mend = require "mend"
return { name = "m12_json_escape", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s = string.rep("\1", 20 << 20)
  return #mend.json.encode({ { s } })
end } } }
