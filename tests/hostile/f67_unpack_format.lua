-- expect: needs_attention step exceeded its instruction budget
-- string.unpack reads its format as packsize does, and pushes a value for each item (130 ns an
-- "i1"): charged nothing, the loop of f66.
return { name = "f67_unpack_format", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local f, s = ("x"):rep(1 << 20), ("\0"):rep(1 << 20)
  local g = ("i1"):rep(4000)
  while true do string.unpack(f, s); string.unpack(g, s) end
end } } }
