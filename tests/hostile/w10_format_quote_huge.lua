-- expect: failed %q of a string of 4194304 bytes, over the sandbox's bound
-- budget: 100000000
-- string.format("%q") of 4 MiB: one C call of 300 ms on a loaded machine, refused.
return { name = "w10", steps = { { name = "w10", retry = { max_attempts = 1 }, execute = function()
  return #string.format("%q", string.rep("\0", 4 << 20))
end } } }
