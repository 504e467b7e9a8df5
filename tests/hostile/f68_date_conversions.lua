-- expect: needs_attention step exceeded its instruction budget
-- os.date calls strftime once for each conversion of its format (170-240 ns for a %c or %Ec):
-- 2000 of them a call were charged only the bytes they made, a tenth of their time.
return { name = "f68_date_conversions", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local f = ("%Ec"):rep(1300)
  while true do os.date(f, 0) end
end } } }
