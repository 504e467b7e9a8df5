-- expect: succeeded "keys":16384
-- budget: 100000000
-- The bound on tables is on their hash part: an array of 1..n is not limited, nor is a map of
-- up to 16384 keys. Its budget is 1e8, as c23's: under ASan its array's growth is mapped
-- afresh each time and charged its pages, which 10M paid for or not by the heap's state.
return { name = "h02", steps = { { name = "h02", execute = function()
  local a, m = {}, {}
  for i = 1, 200000 do a[i] = i end
  for i = 1, 8192 do m[i * 65535] = i; m["k" .. i] = i end
  local n = 0
  for k in pairs(m) do n = n + 1 end
  return { n = #a, keys = n }
end } } }
