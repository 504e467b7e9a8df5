-- expect: needs_attention step exceeded its timeout
local mend = require "mend"
return { name = "f21", steps = { { name = "s", timeout = 0.2, retry = { max_attempts = 1 },
  execute = function()
    local x <close> = setmetatable({}, { __close = function() while true do end end })
    mend.sleep(10)
  end } } }
