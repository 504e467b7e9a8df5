-- expect: needs_attention step exceeded its instruction budget
-- string.rep of 60 KB, two blocks a call that were not charged: 11 s.
return { name = "f59_rep_medium_loop", steps = { { name = "s", execute = function(ctx, input)
  while true do local s = string.rep("x", 60000) end
end } } }
