-- expect: succeeded "turns":8
-- budget: 0
-- memory: 268435456
-- faults: 60000
-- Eight strings of 40 MiB made and dropped, in an engine with no budget to stop the loop. Blocks
-- of 32 MiB or more the C library always maps afresh, some 10k page faults each (20 us of CPU
-- apiece on a virtual machine): the engine gives the blocks its state freed to the next ones
-- (160k faults without that, some 42k with it: the first turns').
return { name = "f63_rep_loop_reuse", steps = { { name = "s", execute = function()
  local n = 0
  for i = 1, 8 do n = n + #string.rep("x", 40 << 20) // (40 << 20) end
  return { turns = n }
end } } }
