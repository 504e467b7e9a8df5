-- expect: failed cannot encode more than 1048576 values
-- A result of 1.1M values: the encoding stops at its bound instead of holding the loop.
return { name = "m11_result_over_1m", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 1100000 do t[i] = i end
  return t
end } } }
