-- expect: needs_attention step exceeded its timeout
-- __close handlers that wait (Lua 5.4 lets them yield) as the step returns: the step's timeout
-- still ends each attempt, and the waits are let go of.
local mend = require "mend"
return { name = "f56_close_sleeps", steps = { { name = "s", timeout = 0.3, retry = { max_attempts = 2, initial = 0.01 }, execute = function(ctx)
  local y <close> = setmetatable({}, { __close = function() mend.sleep(0.05) end })
  local z <close> = setmetatable({}, { __close = function() mend.sleep(5) end })
  return { done = true }
end } } }
