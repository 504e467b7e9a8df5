-- expect: needs_attention step exceeded its timeout
-- budget: 100000000
-- select('#', ...) copies 400,000 arguments in one instruction.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w02", steps = { { name = "w02", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local t = {}
    for i = 1, 400000 do t[i] = i end
    local function spin(...)
      while true do
        local n = select("#", ...)
        if ctx:now() - t0 > 1.05 then return "ran past its deadline" end
      end
    end
    return spin(table.unpack(t))
  end } } }
