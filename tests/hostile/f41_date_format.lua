-- expect: failed os.date: a format of 12582912 bytes
-- budget: 100000000
return { name = "f41_date_format", steps = { { name = "s", execute = function()
  return os.date(string.rep("%%c", 4 << 20)) .. os.date("%Y-%m-%d")
end } } }
