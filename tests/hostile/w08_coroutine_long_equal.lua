-- expect: needs_attention step exceeded its timeout
-- budget: 100000000
-- The long comparisons of w01 in a coroutine the step made: the watchdog stops the thread
-- that runs, not only the attempt's.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w08", steps = { { name = "w08", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local a = string.rep("x", 4 << 20)
    local b = a:sub(1, -2) .. "x"
    local co = coroutine.wrap(function()
      while true do
        if a == b and ctx:now() - t0 > 1.05 then return "ran past its deadline" end
      end
    end)
    return co()
  end } } }
