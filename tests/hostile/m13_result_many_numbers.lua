-- expect: needs_attention step exceeded its instruction budget (50000000 instructions) as its result was encoded
-- budget: 50000000
-- A result of 900k numbers: encoded after the step, outside its limits, it held the loop 2.4 s.
return { name = "m13_result_many_numbers", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {} for i = 1, 900000 do t[i] = i + 0.5 end return t
end } } }
