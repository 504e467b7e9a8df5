-- expect: needs_attention map: exceeded the memory limit (67108864 bytes)
-- budget: 2000000000
-- A map's call over the memory limit is stopped as a step's attempt is: a dead letter that
-- names the limit.
return { name = "m24_map_hog", steps = { { name = "m", map = function()
  local t = {} for i = 1, 100 do t[i] = string.rep("x", 1 << 20) .. i end
  return t
end, step = { execute = function(ctx, item) return 1 end } } } }
