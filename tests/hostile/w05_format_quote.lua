-- expect: needs_attention step exceeded its timeout
-- string.format("%q") of 1 MiB of zero bytes (the most a sandbox quotes): 10 to 20 ms each.
-- The step watches itself: were it still running 0.05 s past its 0.02 s timeout, it
-- would return and its run succeed (the timeout is short: each call allocates 6 MiB, which
-- is charged to the budget, and a dozen calls spend it). Without the watchdog the count hook,
-- which looks at the clock every 10,000 instructions, let such a loop run up to seconds past
-- its deadline.
return { name = "w05", steps = { { name = "w05", timeout = 0.02, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local s = string.rep("\0", 1 << 20)
    while true do
      local q = string.format("%q", s)
      if ctx:now() - t0 > 0.07 then return "ran past its deadline" end
    end
  end } } }
