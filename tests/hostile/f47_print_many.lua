-- expect: failed print: some
-- holds: budget
-- budget: 100000000
-- print makes a string of each number it is given, charged nothing: 300k numbers a call, 8 s for
-- a loop of them under a budget of some 100 ms.
return { name = "f47_print_many", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 300000 do t[i] = i * 1000003 end
  while true do print(table.unpack(t)) end
end } } }
