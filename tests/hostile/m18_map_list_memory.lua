-- expect: needs_attention map: exceeded the memory limit as its list was encoded
-- budget: 2000000000
-- A map's list, encoded under the map call's limits as a step's result is.
return { name = "m18_map_list_memory", steps = { { name = "m", map = function()
  local s = string.rep("x", 12 << 20)
  return { s, s, s, s, s }
end, step = { execute = function(ctx, item) return 1 end } } } }
