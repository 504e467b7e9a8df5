-- expect: failed string.format: some
-- holds: budget
-- %f of 1e308 writes 309 digits, some 13 us each in glibc; a call of 100k such conversions held
-- the loop 1.3 s, charged only the 40 MB it made. A loop of them outran its budget by seconds.
return { name = "f42_format_float_width", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local args = {}
  for i = 1, 100000 do args[i] = 1e308 end
  local f = string.rep("%.99f", 100000)
  while true do local s = string.format(f, table.unpack(args)) end
end } } }
