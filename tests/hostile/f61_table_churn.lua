-- expect: needs_attention step exceeded its instruction budget
-- Tables grown and dropped, keys made: allocations, rehashes and collections (1 s).
return { name = "f61_table_churn", steps = { { name = "s", execute = function(ctx, input)
  while true do
    local t = {}
    for i = 1, 16000 do t["k" .. i] = i end
  end
end } } }
