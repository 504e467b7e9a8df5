-- expect: failed invalid order function
-- A raising comparator, then an inconsistent one: errors, no out-of-bounds read.
return { name = "f49_sort_comparator", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 1000 do t[i] = i % 7 end
  pcall(table.sort, t, function() error("cmp") end)
  table.sort(t, function() return true end)
end } } }
