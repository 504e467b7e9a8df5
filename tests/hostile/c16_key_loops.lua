-- expect: needs_attention idempotency_key exceeded its instruction budget
return { name = "c16", steps = { { name = "s",
  idempotency_key = function(ctx) while true do end end,
  execute = function() return 1 end } } }
