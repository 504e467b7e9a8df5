-- expect: needs_attention step exceeded its instruction budget
-- A coroutine trips the budget and coroutine.resume hands the error back as a value; the step
-- goes on with long instructions. Every thread of the attempt stops at its next instruction
-- once a limit tripped, not 10,000 instructions (here, seconds) later. No timeout: only the
-- budget bounds this step.
return { name = "w09", steps = { { name = "w09", retry = { max_attempts = 1 },
  execute = function()
    local a = string.rep("x", 2 << 20)
    local b = a:sub(1, -2) .. "x"
    local co = coroutine.create(function() while true do end end)
    local ok = coroutine.resume(co)
    local n = 0
    while true do if a == b then n = n + 1 end end
  end } } }
