-- expect: failed table.move: 4611686018427387904 elements in one call
local mend = require "mend"
return { name = "f23_move_huge", steps = { { name = "s", execute = function(ctx, input)
  table.move({}, 1, 1 << 62, 2)
end } } }
