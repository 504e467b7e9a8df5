-- expect: failed table.insert: 4611686018427387904 elements in one call
local mend = require "mend"
return { name = "f24_insert_len", steps = { { name = "s", execute = function(ctx, input)
  local n = 0
  local t = setmetatable({}, { __len = function() n = n + 1; return n == 1 and 1 or 1 << 62 end })
  table.insert(t, 1, "x"); table.insert(setmetatable({}, { __len = function() return 1 << 62 end }), 1, "x")
end } } }
