-- expect: needs_attention step exceeded its timeout
-- An absent key looked up through 1,990 __index tables is one instruction.
-- The step watches itself: were it still running 0.1 s of CPU time past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
local clock = os.clock
return { name = "w07", steps = { { name = "w07", timeout = 1, retry = { max_attempts = 1 },
  execute = function()
    local c0 = clock()
    local t = {}
    for i = 1, 1990 do t = setmetatable({}, { __index = t }) end
    while true do
      local v = t.missing
      if clock() - c0 > 1.1 then return "ran past its deadline" end
    end
  end } } }
