-- expect: needs_attention exceeded
-- holds: budget
-- table.concat turns each number into a new string (some 500 ns each), charged one
-- instruction: a loop of calls on 300k numbers outran its 10M budget fivefold.
return { name = "f44_concat_numbers", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 300000 do t[i] = i * 1000003 end
  while true do local s = table.concat(t, ",") end
end } } }
