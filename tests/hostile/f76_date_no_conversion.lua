-- expect: needs_attention step exceeded its instruction budget
-- os.date of a format with no conversion still calls gmtime_r (localtime_r without the "!")
-- and makes a string: charged only for its conversions, such a call was charged nothing (186
-- to 299 ms of CPU under the budget of 10M, bound 211 to 260 ms).
return { name = "f76_date_no_conversion", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  while true do local a = os.date("!") end
end } } }
