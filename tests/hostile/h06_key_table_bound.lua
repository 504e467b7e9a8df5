-- expect: needs_attention idempotency_key: made a table of more than 16384 keys outside 1..n
-- The same bound met in a step's idempotency_key: named, a dead letter.
return { name = "h06_key_table_bound", steps = { { name = "s",
  idempotency_key = function(ctx)
    local t = {}
    for i = 1, 100000 do t["k" .. i] = i end
    return "k"
  end,
  execute = function() return 1 end } } }
