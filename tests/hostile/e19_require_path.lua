-- expect: failed is not a module name
local mend = require "mend"
return { name = "e19_require_path", steps = { { name = "s", execute = function(ctx, input)
  require "../../../../etc/passwd"
end } } }
