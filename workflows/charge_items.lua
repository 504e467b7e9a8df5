-- A step mapped over a list: each line of an order is charged on its own, eight at a time, and
-- the order is confirmed with the charges in the order of its lines.
--
--   mend run workflows/charge_items.lua --clock virtual
--   mend run workflows/charge_items.lua --clock virtual \
--     --input '{"lines":[{"sku":"a","price":3},{"sku":"c","price":2},{"sku":"b","price":-1}]}'
--                              -- a negative price is refused: exit 3, the lines charged refunded
--
-- The list comes from `map(ctx)` when the step begins and is recorded in the run's history: a
-- restart maps the same list, and no line charged is charged again. Each line has its own
-- idempotency key, "<run>/charge/<line number>", and its own retries; the result is the list of
-- the lines' results. When a line fails for good, no other line starts, those in flight end,
-- and the lines charged are refunded, the latest charged first.
--
-- Input (optional): { lines = { { sku = "book", price = 12 }, ... } } (default: 20 lines)

local mend = require "mend"
local sim = require "mend.sim"

local payments = sim.service{ name = "payments", latency = 0.5, fail_first = 1 }

local function lines(input)
  if input and input.lines then return input.lines end
  local out = {}
  for k = 1, 20 do out[k] = { sku = "sku-" .. k, price = k } end
  return out
end

return {
  name = "charge_items",
  retry = { max_attempts = 4, initial = 0.2, max_delay = 2 },

  steps = {
    { name = "charge", max_concurrency = 8,
      map = function(ctx) return lines(ctx.input) end,
      step = {
        execute = function(ctx, line)
          return payments:call(ctx.idempotency_key, function(_, n)
            if line.price < 0 then return mend.fatal("line " .. line.sku .. ": negative price") end
            return { sku = line.sku, charge = "ch-" .. n, amount = line.price }
          end)
        end,
        compensate = function(ctx, charged)
          payments:call("refund:" .. ctx.idempotency_key, { refunded = charged.charge })
          ctx:log("refunded %s for %s", charged.charge, charged.sku)
        end,
      } },

    { name = "confirm",
      execute = function(ctx)
        local total = 0
        for _, c in ipairs(ctx.results.charge) do total = total + c.amount end
        return { lines = #ctx.results.charge, total = total }
      end },
  },
}
