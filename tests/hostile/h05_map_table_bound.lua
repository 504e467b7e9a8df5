-- expect: needs_attention map: made a table of more than 16384 keys outside 1..n
-- A map's call that the table bound stops names that bound, as a step's attempt does (it said
-- "map: not enough memory", the text lauxlib gives a refused allocation).
return { name = "h05_map_table_bound", steps = { { name = "m", map = function()
  local t = {}
  for i = 1, 100000 do t["k" .. i] = i end
  return { 1, 2 }
end, step = { execute = function(ctx, item) return 1 end } } } }
