-- expect: needs_attention step exceeded its instruction budget
-- Small tables, each grown four times: 0.75 s for the 10M of plain instructions' 50 ms.
return { name = "f62_small_tables", steps = { { name = "s", execute = function(ctx, input)
  while true do local t = {} t[1] = 1 t[2] = 2 t[3] = 3 t[4] = 4 t[5] = 5 end
end } } }
