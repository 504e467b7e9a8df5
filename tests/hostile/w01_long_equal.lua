-- expect: needs_attention step exceeded its timeout
-- budget: 100000000
-- Comparing two equal 4 MiB strings is one instruction of about a quarter of a millisecond.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w01", steps = { { name = "w01", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local a = string.rep("x", 4 << 20)
    local b = a:sub(1, -2) .. "x"
    while true do
      if a == b and ctx:now() - t0 > 1.05 then return "ran past its deadline" end
    end
  end } } }
