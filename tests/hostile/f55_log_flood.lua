-- expect: needs_attention step exceeded its instruction budget
-- holds: budget
-- ctx:log of 1 MiB lines: each a row in the store and a line in the log, 10 ms of C work that
-- was charged only the copy of its buffer, so that a loop of them filled the disk for seconds
-- on a budget of 10M instructions. Each byte logged is charged as an instruction.
return { name = "f55_log_flood", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function(ctx)
  local s = string.rep("x", 1 << 20)
  for i = 1, 200 do ctx:log(s) end
  return { logged = 200 }
end } } }
