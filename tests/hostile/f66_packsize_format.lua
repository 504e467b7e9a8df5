-- expect: needs_attention step exceeded its instruction budget
-- string.packsize reads its format an item at a time (4 ns a byte): a format of 1 MB made once
-- and read again in a loop, charged nothing, held the loop minutes under a budget of 100M.
return { name = "f66_packsize_format", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local f = ("x"):rep(1 << 20)
  while true do string.packsize(f) end
end } } }
