-- expect: needs_attention step exceeded its instruction budget
local mend = require "mend"
return { name = "f19_close_coroutine", steps = { { name = "s", execute = function(ctx, input)
  local co = coroutine.create(function()
    local x <close> = setmetatable({}, { __close = function() while true do end end })
    while true do end
  end)
  coroutine.resume(co)
  while true do coroutine.close(co) end
end } } }
