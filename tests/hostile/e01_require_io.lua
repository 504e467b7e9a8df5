-- expect: failed module \"io\" not found
local mend = require "mend"
return { name = "e01_require_io", steps = { { name = "s", execute = function(ctx, input)
  local io = require "io"; io.open(input.outside, "w"):write("x")
end } } }
