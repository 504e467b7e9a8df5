-- expect: failed field 'dump'
local mend = require "mend"
return { name = "e10_string_dump", steps = { { name = "s", execute = function(ctx, input)
  return string.dump(function() end)
end } } }
