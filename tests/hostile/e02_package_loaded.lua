-- expect: failed global 'package'
local mend = require "mend"
return { name = "e02_package_loaded", steps = { { name = "s", execute = function(ctx, input)
  package.loaded.io.open(input.outside, "w")
end } } }
