-- expect: needs_attention idempotency_key: exceeded the memory limit (67108864 bytes)
-- budget: 2000000000
-- An idempotency_key over the memory limit: stopped as a step's attempt is, a dead letter that
-- names the limit (it was a plain failure, "not enough memory").
return { name = "m25_key_hog", steps = { { name = "s", idempotency_key = function()
  local t = {} for i = 1, 100 do t[i] = string.rep("x", 1 << 20) end
  return "k"
end, execute = function() return 1 end } } }
