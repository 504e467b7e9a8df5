-- expect: failed xxxxxxxx
-- budget: 100000000
-- An error of 8 MiB: the run keeps the start of it, and the engine is not held.
return { name = "c26_huge_error", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  error(string.rep("x", 8 << 20))
end } } }
