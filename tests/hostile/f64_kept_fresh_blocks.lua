-- expect: needs_attention step exceeded its instruction budget
-- budget: 50000000
-- memory: 536870912
-- Strings of 1 MiB made and kept: each a block mapped afresh, 256 page faults of 14-15 us of CPU
-- each on this machine. With only their bytes charged (8 an instruction) a budget of 5e7 let
-- 39k faults through, 0.7 s of CPU; with each page charged, some 12k and 0.2-0.26 s.
return { name = "f64_kept_fresh_blocks", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local kept, n = {}, 0
  while true do
    n = n + 1
    kept[n] = string.rep("x", 1 << 20) .. n
  end
end } } }
