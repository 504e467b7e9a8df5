-- expect: failed error object is a table value
local mend = require "mend"
return { name = "c04_error_table_no_tostring", steps = { { name = "s", execute = function(ctx, input)
  error({ code = 42 })
end } } }
