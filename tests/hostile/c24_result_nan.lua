-- expect: failed cannot encode NaN
-- A result JSON cannot hold fails the step with a message naming where it is.
return { name = "c24_result_nan", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return { x = 0/0 }
end } } }
