-- expect: failed too many results to unpack
-- Unpacking 1e8 values is refused before a value is pushed.
return { name = "f50_select_unpack", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return select('#', table.unpack({}, 1, 1e8))
end } } }
