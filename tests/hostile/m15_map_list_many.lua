-- expect: needs_attention map: map exceeded its instruction budget (50000000 instructions) as its list was encoded
-- budget: 50000000
-- A map whose list has 900k items: its encoding, outside the call's limits, held the loop a second.
return { name = "m15_map_list_many", steps = { { name = "m", map = function()
  local t = {} for i = 1, 900000 do t[i] = i end return t
end, step = { execute = function(ctx, item) return item end } } } }
