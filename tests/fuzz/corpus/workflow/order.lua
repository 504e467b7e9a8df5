-- An order saga: reserve stock, charge the card, ship.
--
--   mend run workflows/order.lua                                  -- succeeds
--   mend run workflows/order.lua --input '{"card":"declined"}'   -- compensates: exit 3
--
-- The payment gateway drops its first request (a retryable error), so every run shows one
-- retry with backoff. A declined card is a business error (mend.fatal): it is not retried, and
-- the steps already done are compensated in reverse order (the stock is released). Each
-- service call carries the step's idempotency key, so a retried or recovered attempt has no
-- second effect.
--
-- Input (all optional): { order = "o-17", items = { { sku = "book", qty = 1 } },
--                         amount = 42, card = "visa" | "declined", address = "..." }

local mend = require "mend"
local sim = require "mend.sim"

local inventory = sim.service{ name = "inventory", latency = 0.05 }
local payments = sim.service{ name = "payments", latency = 0.2, fail_first = 1 }
local shipping = sim.service{ name = "shipping", latency = 0.1 }

local function order_of(input)
  input = input or {}
  return {
    id = input.order or "o-1",
    items = input.items or { { sku = "book", qty = 1 } },
    amount = input.amount or 42,
    card = input.card or "visa",
    address = input.address or "1 Main St",
  }
end

-- A compensation is a different effect from the step it undoes, so it gets its own key,
-- derived from the step's (stable) one.
local function undo_key(ctx, what)
  return what .. ":" .. ctx.idempotency_key
end

return {
  name = "order",
  retry = { max_attempts = 4, initial = 0.5, multiplier = 2, max_delay = 5 },

  steps = {
    { name = "reserve",
      execute = function(ctx, input)
        local order = order_of(input)
        local r = inventory:call(ctx.idempotency_key, function(_, n)
          return { reservation = ("res-%d"):format(n), items = order.items }
        end)
        ctx:log("reserved %d line(s) for order %s as %s", #order.items, order.id, r.reservation)
        return r
      end,
      compensate = function(ctx, result)
        inventory:call(undo_key(ctx, "release"), { released = result.reservation })
        ctx:log("released %s", result.reservation)
      end,
    },

    { name = "charge",
      execute = function(ctx, input)
        local order = order_of(input)
        local c = payments:call(ctx.idempotency_key, function(_, n)
          if order.card == "declined" then
            return mend.fatal("card declined for order " .. order.id)
          end
          return { charge_id = ("ch-%d"):format(n), amount = order.amount }
        end)
        ctx:log("charged %s for order %s (%s)", c.amount, order.id, c.charge_id)
        return c
      end,
      compensate = function(ctx, result)
        payments:call(undo_key(ctx, "refund"), { refunded = result.charge_id })
        ctx:log("refunded %s", result.charge_id)
      end,
    },

    { name = "ship",
      execute = function(ctx, input)
        local order = order_of(input)
        local reserve, charge = ctx.results.reserve, ctx.results.charge
        local s = shipping:call(ctx.idempotency_key, function(_, n)
          return { tracking = ("trk-%d"):format(n), reservation = reserve.reservation,
                   charge_id = charge.charge_id, address = order.address }
        end)
        ctx:log("shipped %s to %s, tracking %s", reserve.reservation, order.address, s.tracking)
        return s
      end,
    },
  },
}
