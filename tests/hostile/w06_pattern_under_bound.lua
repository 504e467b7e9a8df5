-- expect: needs_attention step exceeded its
-- A pattern call just under the sandbox's bound runs to its end in C; the budget it is charged
-- stops the loop after a few.
return { name = "w06", steps = { { name = "w06", timeout = 0.2, retry = { max_attempts = 1 },
  execute = function()
    local s = string.rep("a", 1000)
    while true do string.find(s, "a-b") end
  end } } }
