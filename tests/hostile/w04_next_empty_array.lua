-- expect: needs_attention step exceeded its timeout
-- budget: 100000000
-- next(t) over an emptied array of 1M slots scans them all in one call.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w04", steps = { { name = "w04", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local t, next = {}, next
    for i = 1, 1000000 do t[i] = true end
    for i = 1, 1000000 do t[i] = nil end
    while true do
      next(t)
      if ctx:now() - t0 > 1.05 then return "ran past its deadline" end
    end
  end } } }
