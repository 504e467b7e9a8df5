-- An order that fans out: after the card is charged, stock is reserved in two warehouses and
-- a label printed at the same time (a parallel group), then gift wrapping only when asked for
-- (a step with `when`), then shipping.
--
--   mend run workflows/order_parallel.lua --clock virtual                         -- succeeds
--   mend run workflows/order_parallel.lua --input '{"gift":true}'                -- wraps too
--   mend run workflows/order_parallel.lua --input '{"north":"empty"}'            -- compensates: exit 3
--
-- The three branches take 1 to 2 s each and end together at about +2 s, not +4.5 s. The label
-- printer drops its first request (a retryable error): its branch retries on its own, with
-- its own idempotency key, while the others go on. When the north warehouse has no stock (a
-- business error), no new attempt of the other branches starts; those in flight end, and
-- everything that succeeded is undone, the latest completed first, the charge last.
--
-- Input (all optional): { order = "o-17", amount = 42, gift = false, north = "ok" | "empty" }

local mend = require "mend"
local sim = require "mend.sim"

local payments = sim.service{ name = "payments", latency = 0.2 }
local north = sim.service{ name = "north", latency = 2 }
local south = sim.service{ name = "south", latency = 1.5 }
local printer = sim.service{ name = "printer", latency = 0.5, fail_first = 1 }
local wrapping = sim.service{ name = "wrapping", latency = 0.3 }
local shipping = sim.service{ name = "shipping", latency = 0.1 }

local function undo_key(ctx, what) return what .. ":" .. ctx.idempotency_key end

local function reserve_at(warehouse, service)
  return {
    name = warehouse,
    execute = function(ctx, input)
      local r = service:call(ctx.idempotency_key, function(_, n)
        if warehouse == "north" and (input or {}).north == "empty" then
          return mend.fatal("no stock in the north warehouse")
        end
        return { reservation = ("%s-%d"):format(warehouse, n) }
      end)
      ctx:log("reserved %s", r.reservation)
      return r
    end,
    compensate = function(ctx, result)
      service:call(undo_key(ctx, "release"), { released = result.reservation })
      ctx:log("released %s", result.reservation)
    end,
  }
end

return {
  name = "order_parallel",
  retry = { max_attempts = 4, initial = 0.5, multiplier = 2, max_delay = 5 },

  steps = {
    { name = "charge",
      execute = function(ctx, input)
        local c = payments:call(ctx.idempotency_key, function(_, n)
          return { charge_id = ("ch-%d"):format(n), amount = (input or {}).amount or 42 }
        end)
        ctx:log("charged %s (%s)", c.amount, c.charge_id)
        return c
      end,
      compensate = function(ctx, result)
        payments:call(undo_key(ctx, "refund"), { refunded = result.charge_id })
        ctx:log("refunded %s", result.charge_id)
      end,
    },

    { name = "prepare", max_concurrency = 3,
      parallel = {
        reserve_at("north", north),
        reserve_at("south", south),
        { name = "label",
          execute = function(ctx)
            return printer:call(ctx.idempotency_key, function(_, n) return { label = "lbl-" .. n } end)
          end },
      },
    },

    { name = "wrap",
      when = function(ctx) return ctx.input ~= nil and ctx.input.gift == true end,
      execute = function(ctx)
        return wrapping:call(ctx.idempotency_key, { wrapped = true })
      end,
    },

    { name = "ship",
      execute = function(ctx)
        local p = ctx.results.prepare
        local s = shipping:call(ctx.idempotency_key, function(_, n)
          return { tracking = ("trk-%d"):format(n), from = { p.north.reservation, p.south.reservation },
                   label = p.label.label, wrapped = ctx.results.wrap ~= nil }
        end)
        ctx:log("shipped, tracking %s", s.tracking)
        return s
      end,
    },
  },
}
