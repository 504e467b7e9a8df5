-- expect: failed string.pack: some
-- holds: budget
-- string.pack pads a "c" item a byte at a time: c30000000 held the loop ~300 ms a call, charged nothing.
return { name = "f46_pack_pad", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  while true do local s = string.pack("c30000000", "") end
end } } }
