-- expect: failed (error object is a table value)
-- budget: 2000000000
-- An error object of 2M entries: read raw, its size costs the engine nothing.
return { name = "m19_error_table_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {} for i = 1, 2000000 do t[i] = i end
  error(t)
end } } }
