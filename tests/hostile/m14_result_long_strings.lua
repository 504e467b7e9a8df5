-- expect: needs_attention step exceeded its instruction budget (50000000 instructions) as its result was encoded
-- budget: 50000000
-- A result of 40 MiB of strings: 1.5 s to encode, then as long to store.
return { name = "m14_result_long_strings", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s = string.rep("x", 20 << 20) return { s, s }
end } } }
