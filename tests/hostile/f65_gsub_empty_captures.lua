-- expect: needs_attention step exceeded its instruction budget
-- gsub reads its replacement string again at each match: "%0" of an empty match adds nothing to
-- the result, (n + 1) times the escapes of work in one call that only the start positions were
-- charged for: 300 bytes of each held the loop 12.7 s under a budget of 10M.
return { name = "f65_gsub_empty_captures", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s, r = ("a"):rep(300), ("%0"):rep(300)
  while true do s:gsub("", r) end
end } } }
