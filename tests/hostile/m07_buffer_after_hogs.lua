-- expect: succeeded "big":25165824
-- budget: 100000000
return { name = "m07_buffer_after_hogs", steps = { { name = "s", execute = function()
  return { big = #string.rep("x", 24 << 20) }
end } } }
