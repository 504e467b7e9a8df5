-- expect: needs_attention more than 16384 keys
-- A result of a million string keys: the table bound (16384 outside 1..n) stops it as it grows.
return { name = "h03_result_many_keys", steps = { { name = "s", execute = function()
  local t = {}
  for i = 1, 1000000 do t["k" .. i] = i end
  return t
end } } }
