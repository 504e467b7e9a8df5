-- The playground: an order saga for `mend repl`, with a payment service you break and fix.
--
--   $ mend repl --seed 1
--   mend> load "playground"                     --> "playground"
--   mend> id = start("playground", { amount = 30 })
--   mend> run()                                 -- succeeds: reserve, charge, ship
--   mend> playground.break_payments()           -- every payment call fails from now on
--   mend> id = start("playground")
--   mend> advance(1)                            -- attempt 2 fails: watch the backoff
--   mend> advance(10)                           -- 3 failures in a row: the breaker opens
--   mend> breakers()
--   mend> playground.fix_payments()             -- the next call goes through
--   mend> advance(30)                           -- the breaker half-opens, the probe succeeds
--   mend> history(id)
--   mend> start("playground", { card = "declined" }) ; run()  -- compensates in reverse
--
-- The simulated services live in the global table `playground`, which the REPL shares with
-- this file (a workflow is loaded into the REPL's Lua state), so `playground.payments` is the
-- very service the charge step calls: change its `fail_first`, `fail_rate`, `lose_first` or
-- `latency` (see lua/mend/sim.lua) and the next attempt sees it. Loading the file again keeps
-- the services as they are. Retries have no jitter, so the delays read 1s, 2s, 4s, 8s.
--
-- Input (all optional): { order = "o-1", amount = 42, card = "visa" | "declined" }

local mend = require "mend"
local sim = require "mend.sim"

local pg = rawget(_G, "playground")
if not pg then
  pg = {
    inventory = sim.service{ name = "inventory", latency = 0.05 },
    payments = sim.service{ name = "payments", latency = 0.2 },
    shipping = sim.service{ name = "shipping", latency = 0.1 },
  }
  rawset(_G, "playground", pg)
end

--- The next n payment calls fail with a retryable error (every call, when n is nil).
function pg.break_payments(n)
  local p = pg.payments
  if n then
    p.fail_first, p.fail_rate = p.calls + n, 0
  else
    p.fail_first, p.fail_rate = p.calls, 1
  end
end

--- Payment calls succeed again from the next one on.
function pg.fix_payments()
  local p = pg.payments
  p.fail_first, p.fail_rate = p.calls, 0
end

local function undo_key(ctx, what) return what .. ":" .. ctx.idempotency_key end

return {
  name = "playground",
  description = "an order whose payment service can be broken from the REPL",
  retry = { max_attempts = 6, initial = 1, multiplier = 2, max_delay = 8, jitter = 0 },

  steps = {
    { name = "reserve",
      execute = function(ctx, input)
        local r = pg.inventory:call(ctx.idempotency_key, function(_, n)
          return { reservation = ("res-%d"):format(n), order = input.order or "o-1" }
        end)
        ctx:log("reserved %s", r.reservation)
        return r
      end,
      compensate = function(ctx, result)
        pg.inventory:call(undo_key(ctx, "release"), { released = result.reservation })
        ctx:log("released %s", result.reservation)
      end,
    },

    { name = "charge",
      breaker = { key = "payments", failure_threshold = 3, open_seconds = 10,
                  success_threshold = 1, half_open_max = 1 },
      execute = function(ctx, input)
        local c = pg.payments:call(ctx.idempotency_key, function(_, n)
          if input.card == "declined" then return mend.fatal("card declined") end
          return { charge_id = ("ch-%d"):format(n), amount = input.amount or 42 }
        end)
        ctx:log("charged %s (%s)", c.amount, c.charge_id)
        return c
      end,
      compensate = function(ctx, result)
        pg.payments:call(undo_key(ctx, "refund"), { refunded = result.charge_id })
        ctx:log("refunded %s", result.charge_id)
      end,
    },

    { name = "ship",
      execute = function(ctx)
        local s = pg.shipping:call(ctx.idempotency_key, function(_, n)
          return { tracking = ("trk-%d"):format(n) }
        end)
        ctx:log("shipped, tracking %s", s.tracking)
        return s
      end,
    },
  },
}
