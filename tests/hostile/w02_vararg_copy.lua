-- expect: needs_attention step exceeded its timeout
-- select('#', ...) copies 400,000 arguments in one instruction.
-- The step watches itself: were it still running 0.1 s of CPU time past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
local clock = os.clock
return { name = "w02", steps = { { name = "w02", timeout = 1, retry = { max_attempts = 1 },
  execute = function()
    local c0 = clock()
    local t = {}
    for i = 1, 400000 do t[i] = i end
    local function spin(...)
      while true do
        local n = select("#", ...)
        if clock() - c0 > 1.1 then return "ran past its deadline" end
      end
    end
    return spin(table.unpack(t))
  end } } }
