-- expect: needs_attention step exceeded its instruction budget
-- budget: 100000000
-- gsub with a table replacement: the match pushed as a string and looked up at each match of an
-- empty pattern, charged as a start position: 1369-2580 ms of CPU under a budget of 100M,
-- bound 902 ms.
return { name = "f75_gsub_empty_table", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s, t = ("a"):rep(1 << 20), {}
  while true do s:gsub("", t) end
end } } }
