-- expect: failed idempotency_key: a key holding a NUL byte
-- A key is kept and sent (Idempotency-Key) as a C string: "order-7\0x", made of a run's input,
-- was "order-7", the key of another run's step, whose charge the service would answer with.
return { name = "c33_key_nul", steps = { { name = "s", retry = { max_attempts = 1 },
  idempotency_key = function(ctx) return "order-7\0x" end,
  execute = function(ctx) return ctx.idempotency_key end } } }
