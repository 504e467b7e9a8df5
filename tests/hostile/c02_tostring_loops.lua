-- expect: needs_attention the error's __tostring exceeded its
-- holds: budget
-- The __tostring has limits of its own, 1M instructions and 50 ms: whichever ends it first
-- (on a loaded machine the 50 ms can come before the 1M instructions).
local mend = require "mend"
return { name = "c02_tostring_loops", steps = { { name = "s", execute = function(ctx, input)
  error(setmetatable({}, { __tostring = function() while true do end end }))
end } } }
