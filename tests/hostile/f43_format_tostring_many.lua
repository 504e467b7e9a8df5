-- expect: failed string.format: some
-- holds: budget
-- budget: 100000000
-- %s of a number makes a new string of it (some 500 ns); the call was charged nothing for it.
return { name = "f43_format_tostring_many", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 300000 do t[i] = i * 1000003 end
  local f = string.rep("%s", 300000)
  while true do local s = string.format(f, table.unpack(t)) end
end } } }
