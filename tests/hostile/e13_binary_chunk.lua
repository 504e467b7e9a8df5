-- expect: failed binary chunks are not available
local mend = require "mend"
return { name = "e13_binary_chunk", steps = { { name = "s", execute = function(ctx, input)
  return load("\27LuaT\0garbage", nil, "b")
end } } }
