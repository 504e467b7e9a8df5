-- expect: needs_attention step exceeded its timeout
-- string.format('%q') of 4 MiB of zero bytes: one C call, its buffer charged as it grows.
-- The step watches itself: were it still running 0.1 s of CPU time past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
local clock = os.clock
return { name = "w05", steps = { { name = "w05", timeout = 1, retry = { max_attempts = 1 },
  execute = function()
    local c0 = clock()
    local s = string.rep("\0", 4 << 20)
    while true do
      local q = string.format("%q", s)
      if clock() - c0 > 1.1 then return "ran past its deadline" end
    end
  end } } }
