-- expect: needs_attention exceeded its
return { name = "f13", steps = { { name = "s", timeout = 0.2, retry = { max_attempts = 1 },
  execute = function() while true do pcall(string.rep, "x", 1000) end end } } }
