-- expect: failed xxxxxxxx
-- budget: 2000000000
-- An error of 20 MiB, and the 20 MiB more of error()'s position prefix: the run keeps the start.
return { name = "m20_error_string_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  error(string.rep("x", 20 << 20))
end } } }
