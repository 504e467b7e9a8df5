-- expect: needs_attention step exceeded its timeout
-- budget: 100000000
-- table.sort runs in C and calls a comparator whose every instruction compares 4 MiB.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it
-- would return and its run succeed. Without the watchdog the count hook, which looks at the
-- clock every 10,000 instructions, let such a loop run up to seconds past its deadline.
return { name = "w03", steps = { { name = "w03", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local a = string.rep("x", 4 << 20)
    local b = a:sub(1, -2) .. "x"
    local t, past = {}, false
    for i = 1, 2000 do t[i] = i end
    local function less(x, y)
      if a == b and ctx:now() - t0 > 1.05 then past = true end
      return x < y
    end
    while not past do table.sort(t, less) end
    return "ran past its deadline"
  end } } }
