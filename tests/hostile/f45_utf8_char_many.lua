-- expect: failed utf8.char: some
-- holds: budget
-- budget: 100000000
-- utf8.char makes a string of each argument (some 240 ns each), charged nothing.
return { name = "f45_utf8_char_many", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 300000 do t[i] = 0x7FFFFFFF end
  while true do local s = utf8.char(table.unpack(t)) end
end } } }
