-- expect: failed attempt to load a binary chunk
local mend = require "mend"
return { name = "e14_corrupt_binary_bt", steps = { { name = "s", execute = function(ctx, input)
  local f, err = load("\27LuaT\0\25\147\r\n\26\n\4\8\8xV\0\0garbage", nil, "bt")
  if not f then error(err) end
  return f()
end } } }
