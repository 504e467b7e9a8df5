-- A payment that is charged exactly once although its first response is lost.
--
--   mend run workflows/payment_idempotent.lua --clock virtual --input '{"amount":25}'
--
-- The gateway applies the first charge and then the response is lost (a retryable error: the
-- step cannot tell whether the card was charged). mend retries the step with the same
-- ctx.idempotency_key, and the gateway, which dedupes by key, answers with the charge it
-- recorded instead of charging again. The "verify" step checks that the key's charge was
-- applied once, and fails the run (fatal) if it was not.

local mend = require "mend"
local sim = require "mend.sim"

local gateway = sim.service{ name = "gateway", lose_first = 1, latency = 0.2 }

return {
  name = "payment_idempotent",
  retry = { max_attempts = 3, initial = 0.5 },

  steps = {
    { name = "charge",
      execute = function(ctx, input)
        local amount = (input and input.amount) or 25
        local charge = gateway:call(ctx.idempotency_key, function(key, n)
          return { charge_id = ("ch-%d"):format(n), amount = amount, key = key }
        end)
        ctx:log("attempt %d: gateway answered %s for key %s", ctx.attempt, charge.charge_id,
                ctx.idempotency_key)
        return charge
      end,
    },

    { name = "verify",
      execute = function(ctx)
        local charge = ctx.results.charge
        local applied = gateway.applied[charge.key] or 0
        if applied ~= 1 then
          return mend.fatal(("key %s was charged %d times"):format(charge.key, applied))
        end
        ctx:log("%s charged once after %d gateway call(s)", charge.charge_id, gateway.calls)
        return { charge_id = charge.charge_id, applied = applied, gateway_calls = gateway.calls }
      end,
    },
  },
}
