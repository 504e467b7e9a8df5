-- expect: needs_attention step exceeded its timeout
-- The long comparisons of w01 in a coroutine the step made: the watchdog stops the thread
-- that runs, not only the attempt's.
-- The step watches itself: were it still running 0.1 s of CPU time past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
local clock = os.clock
return { name = "w08", steps = { { name = "w08", timeout = 1, retry = { max_attempts = 1 },
  execute = function()
    local c0 = clock()
    local a = string.rep("x", 8 << 20)
    local b = a:sub(1, -2) .. "x"
    local co = coroutine.wrap(function()
      while true do
        if a == b and clock() - c0 > 1.1 then return "ran past its deadline" end
      end
    end)
    return co()
  end } } }
