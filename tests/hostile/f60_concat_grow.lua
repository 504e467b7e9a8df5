-- expect: needs_attention step exceeded its instruction budget
-- A string grown by concatenation copies what it held each time: 5 s.
return { name = "f60_concat_grow", steps = { { name = "s", execute = function(ctx, input)
  while true do
    local s = ""
    for i = 1, 2000 do s = s .. "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" end
  end
end } } }
