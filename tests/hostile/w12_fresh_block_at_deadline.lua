-- expect: needs_attention step exceeded its timeout
-- budget: 0
-- memory: 268435456
-- faults: 30000
-- overrun: 100
-- A step under a timeout alone makes, 50 ms before its deadline, a string of 80 MiB in one
-- concatenation: one instruction, whose block is mapped afresh and filled there, some 20k
-- page faults (14-15 us of CPU each on a virtual machine: 300 ms) that neither the count hook
-- nor the watchdog can cut short. The allocator refuses a block whose pages cannot be faulted
-- in before the deadline, and the step is stopped for its timeout there. The step watches
-- itself too: were it still running past its deadline, it would return and its run succeed.
-- The bound on faults lies between what the 40 MiB string costs alone (up to 20.5k pages: its
-- buffer and its copy, when no freed memory is there to take again) and that plus the 80 MiB
-- block's 20.5k (41k).
return { name = "w12", steps = { { name = "w12", timeout = 0.5, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local a = string.rep("x", 40 << 20)
    while ctx:now() - t0 < 0.45 do end
    local b = a .. a
    if ctx:now() - t0 > 0.5 then return "ran past its deadline" end
    return #b
  end } } }
