-- expect: needs_attention step exceeded its instruction budget
-- budget: 100000000
-- gsub with a function replacement calls it at each match of an empty pattern (a match a
-- start position): the call was counted one instruction, the start one step; f65 charged only
-- a replacement string's escapes. 1308-2786 ms of CPU under a budget of 100M, bound 902 ms.
return { name = "f74_gsub_empty_function", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s, f = ("a"):rep(1 << 20), function() end
  while true do s:gsub("", f) end
end } } }
