-- A flaky dependency protected by a circuit breaker.
--
--   mend run workflows/flaky_breaker.lua --clock virtual
--
-- The rates API fails its first 5 calls with retryable errors. After 3 consecutive failures
-- the breaker "rates-api" opens: the step waits in breaker_open, and those waits are neither
-- executed nor counted as attempts. After 10 s the breaker half-opens and lets one probe
-- through; the probes of calls 4 and 5 fail and open it again, the probe of call 6 succeeds
-- and closes it, and the run succeeds with 6 attempts out of the 8 allowed. The timeline of
-- `mend run` (or `mend history RUN`) shows each breaker change.

local sim = require "mend.sim"

local rates_api = sim.service{ name = "rates-api", fail_first = 5, latency = 0.1 }

return {
  name = "flaky_breaker",
  retry = { max_attempts = 8, initial = 1, multiplier = 2, max_delay = 4 },

  steps = {
    { name = "fetch_rates",
      breaker = { key = "rates-api", failure_threshold = 3, open_seconds = 10,
                  success_threshold = 1, half_open_max = 1 },
      execute = function(ctx)
        local rates = rates_api:call(ctx.idempotency_key, { EUR = 1.0, USD = 1.08 })
        ctx:log("rates fetched on attempt %d after %d call(s)", ctx.attempt, rates_api.calls)
        return rates
      end,
    },

    { name = "publish",
      execute = function(ctx)
        local rates = ctx.results.fetch_rates
        ctx:log("publishing EUR/USD %.2f", rates.USD / rates.EUR)
        return { published = true, usd = rates.USD }
      end,
    },
  },
}
