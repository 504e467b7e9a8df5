-- expect: failed invalid conversion
-- Widths of more than two digits are refused by Lua's format.
return { name = "f48_format_width", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return string.format("%99999d", 1)
end } } }
