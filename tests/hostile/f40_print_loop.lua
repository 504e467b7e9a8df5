-- expect: needs_attention step exceeded its instruction budget
return { name = "f40_print_loop", steps = { { name = "s", execute = function()
  local s = string.rep("p", 16 << 20)   -- charged before it is written: nothing is
  while true do print(s) end
end } } }
