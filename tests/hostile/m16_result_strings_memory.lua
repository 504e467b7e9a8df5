-- expect: needs_attention step exceeded the memory limit (67108864 bytes) as its result was encoded
-- budget: 2000000000
-- Under a budget that lets it through, a result of 60 MiB of strings (one 12 MiB string five
-- times: 12 MiB in the state) whose encoding jansson would build outside the state's allocator.
return { name = "m16_result_strings_memory", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s = string.rep("x", 12 << 20)
  return { s, s, s, s, s }
end } } }
