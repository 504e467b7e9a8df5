-- expect: needs_attention step exceeded its instruction budget
-- Blocks under 64 KiB were not charged at all: 60 KB a concatenation held the loop 8 s.
return { name = "f58_concat_medium_loop", steps = { { name = "s", execute = function(ctx, input)
  local s = string.rep("x", 60000)
  while true do local t = s .. "y" end
end } } }
