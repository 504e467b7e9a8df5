-- expect: needs_attention retryable: again
-- A dependency's advice of an endless retry_after is clamped to the policy's max_retry_after.
local mend = require "mend"
return { name = "c27_retry_after_inf", steps = { { name = "s", retry = { max_attempts = 2, max_retry_after = 0.01 }, execute = function()
  error(mend.retryable("again", { retry_after = math.huge }))
end } } }
