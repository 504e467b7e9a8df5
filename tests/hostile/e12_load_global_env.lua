-- expect: succeeded "io":false
local mend = require "mend"
return { name = "e12_load_global_env", steps = { { name = "s", execute = function(ctx, input)
  local f = load("return io, os.execute, _G.package", "x", "t", _G)
  local a, b, c = f()
  return { io = a ~= nil, exec = b ~= nil, package = c ~= nil }
end } } }
