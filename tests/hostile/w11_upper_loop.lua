-- expect: needs_attention step exceeded its
-- budget: 100000000
-- string.upper, lower and reverse of 4 MiB: one pass in C each (about 35 ms on a loaded
-- machine), done in pieces of 1 MiB in a sandbox, each charged to the budget, with the
-- limits looked at between two.
-- The step watches itself: were it still running 0.05 s past its 1 s timeout, it would
-- return and its run succeed.
return { name = "w11", steps = { { name = "w11", timeout = 1, retry = { max_attempts = 1 },
  execute = function(ctx)
    local t0 = ctx:now()
    local s = string.rep("a", 4 << 20)
    while true do
      local u = s:upper()
      u = u:lower()
      u = u:reverse()
      if ctx:now() - t0 > 1.05 then return "ran past its deadline" end
    end
  end } } }
