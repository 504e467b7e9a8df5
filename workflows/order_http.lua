-- The order saga of workflows/order.lua against HTTP services: reserve stock, charge the card,
-- ship, each a mend.http call to workflows/order_service.py.
--
--   python3 workflows/order_service.py --port 8089 --busy 1 --flaky 1 &
--   mend run workflows/order_http.lua --input '{"service":"http://127.0.0.1:8089"}'
--   mend run workflows/order_http.lua --input '{"service":"http://127.0.0.1:8089","card":"declined"}'
--
-- What the services answer decides what mend does, with no mapping written here: the gateway's
-- 429 (--busy) is retried after its Retry-After, the shipper's 503 (--flaky) with backoff, and a
-- declined card's 402 is fatal, so the reservation and nothing else is released. Every POST
-- carries the step's idempotency key, so a retried or recovered step has no second effect; a
-- compensation is another effect and sends a key of its own.
--
-- Input: { service = "http://127.0.0.1:8089", order = "o-1", items = {...}, amount = 42,
--          card = "visa" | "declined", address = "..." }

local mend = require "mend"

local function post(ctx, path, body, key)
  local base = ctx.input.service or "http://127.0.0.1:8089"
  return mend.http{ method = "POST", url = base .. path, json = body, timeout = 10,
                    headers = key and { ["Idempotency-Key"] = key } or nil }.json
end

return {
  name = "order_http",
  retry = { max_attempts = 4, initial = 0.5, multiplier = 2, max_delay = 5 },

  steps = {
    { name = "reserve",
      execute = function(ctx, input)
        return post(ctx, "/inventory/reserve", { items = input.items or { { sku = "book", qty = 1 } } })
      end,
      compensate = function(ctx, result)
        post(ctx, "/inventory/release", { reservation = result.reservation },
             "release:" .. ctx.idempotency_key)
      end,
    },
    { name = "charge",
      execute = function(ctx, input)
        return post(ctx, "/payments/charge", { amount = input.amount or 42, card = input.card or "visa" })
      end,
      compensate = function(ctx, result)
        post(ctx, "/payments/refund", { charge_id = result.charge_id }, "refund:" .. ctx.idempotency_key)
      end,
    },
    { name = "ship",
      execute = function(ctx, input)
        return post(ctx, "/shipping/ship", { address = input.address or "1 Main St" })
      end,
    },
  },
}
