local mend = require "mend"
return {
  name = "all_fields",
  description = "every field the loader knows",
  retry = { max_attempts = 5, initial = 0.5, multiplier = 2, max_delay = 30, jitter = 0.1,
            strategy = "exponential", jitter_mode = "full", max_retry_after = 60,
            attention_after = 3 },
  compensate_retry = { max_attempts = 10, strategy = "fixed", initial = 1 },
  breaker = { failure_threshold = 5, open_seconds = 30, success_threshold = 2,
              half_open_max = 1, max_concurrency = 4 },
  steps = {
    { name = "wait", sleep = 2 },
    { name = "charge", description = "x", timeout = 5, breaker = "payments",
      execute = function(ctx, input) return input end,
      compensate = function(ctx) end,
      idempotency_key = function(ctx) return "k" end,
      retry = { max_attempts = 2, strategy = "linear", jitter_mode = "decorrelated" },
      compensate_retry = { max_attempts = 3 } },
    { name = "ship", execute = function() return true end,
      breaker = { key = "shipping", failure_threshold = 1, max_concurrency = 0 } },
  },
}
