-- expect: needs_attention step exceeded its instruction budget (50000000 instructions) as its result was encoded
-- budget: 50000000
-- A result of 1.1M values: the encoding, charged to the step's budget, stops long before the
-- bound of 1M values that holds an engine without a budget.
return { name = "m11_result_over_1m", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 1100000 do t[i] = i end
  return t
end } } }
