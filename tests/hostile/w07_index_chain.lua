-- expect: needs_attention step exceeded its timeout
-- An absent key looked up through 1,990 __index tables is one instruction.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w07", steps = { { name = "w07", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local t = {}
    for i = 1, 1990 do t = setmetatable({}, { __index = t }) end
    while true do
      local v = t.missing
      if ctx:now() - t0 > 1.05 then return "ran past its deadline" end
    end
  end } } }
