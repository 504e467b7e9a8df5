-- expect: needs_attention step exceeded its instruction budget
-- tostring of a float formats it with snprintf (%.14g) in one C call, charged as one call:
-- 518 ms of CPU under the budget of 10M, bound 186 ms.
return { name = "f72_tostring_float", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local x = 1 / 3
  while true do local a = tostring(x) end
end } } }
