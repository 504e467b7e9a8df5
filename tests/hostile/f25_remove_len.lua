-- expect: failed table.remove: 4611686018427387904 elements in one call
local mend = require "mend"
return { name = "f25_remove_len", steps = { { name = "s", execute = function(ctx, input)
  table.remove(setmetatable({}, { __len = function() return 1 << 62 end }), 1)
end } } }
