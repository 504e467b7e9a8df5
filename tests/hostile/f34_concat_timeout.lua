-- expect: needs_attention step exceeded its
return { name = "f34", steps = { { name = "s", timeout = 0.2, retry = { max_attempts = 1 },
  execute = function()
    local s = string.rep("x", 16 << 20)
    while true do pcall(function() local t = s .. "y" end) end
  end } } }
