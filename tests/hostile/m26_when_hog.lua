-- expect: needs_attention when: exceeded the memory limit (67108864 bytes)
-- budget: 2000000000
-- A step's when over the memory limit: a dead letter that names the limit.
return { name = "m26_when_hog", steps = { { name = "s", when = function()
  local t = {} for i = 1, 100 do t[i] = string.rep("x", 1 << 20) end
  return true
end, execute = function() return 1 end } } }
