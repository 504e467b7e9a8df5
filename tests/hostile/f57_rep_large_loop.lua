-- expect: needs_attention step exceeded its instruction budget
-- Blocks the C library maps afresh each time: 3-5 ns a byte on a virtual machine (0.7-1.3 s).
return { name = "f57_rep_large_loop", steps = { { name = "s", execute = function(ctx, input)
  while true do local s = string.rep("x", 20 << 20) end
end } } }
