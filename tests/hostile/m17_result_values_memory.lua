-- expect: needs_attention step exceeded the memory limit (67108864 bytes) as its result was encoded
-- budget: 2000000000
-- Under a budget that lets it through, a result of 600k numbers (some 38 MiB as jansson values)
-- from a step that keeps 20 MiB in the state.
local kept
return { name = "m17_result_values_memory", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  kept = string.rep("k", 20 << 20)
  local t = {} for i = 1, 600000 do t[i] = i end
  return t
end } } }
