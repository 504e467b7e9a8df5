-- expect: needs_attention map: not enough memory
-- A map's call over the memory limit is stopped as a step's attempt is: a dead letter.
return { name = "m24_map_hog", steps = { { name = "m", map = function()
  local t = {} for i = 1, 100 do t[i] = string.rep("x", 1 << 20) .. i end
  return t
end, step = { execute = function(ctx, item) return 1 end } } } }
