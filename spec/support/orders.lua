-- The order workflow of the reuse specs (spec/reuse*_spec.lua): "charge" keyed by the order
-- ("charge-N"), its result "c-" .. the charges so far, its compensation logging the run it
-- undoes; then a wait for "ok" (10 s): a run not told ok turns back. Must never: hold a spec's
-- own assertions.
local H = require "spec.helper"

local M = {}

function M.order_def(log)
  return { name = "order", steps = {
    { name = "charge", idempotency_key = function(ctx) return "charge-" .. ctx.input.order end,
      execute = function() log.charges = log.charges + 1; return "c-" .. log.charges end,
      compensate = function(ctx) log.refunds[#log.refunds + 1] = ctx.run_id end },
    { name = "ok", wait_for = "ok", timeout = 10 } } }
end

-- An engine (H.new_engine) with the order workflow registered on a new log (charges counted,
-- refunds by run id): the engine, the log, the database.
function M.engine()
  local eng, db = H.new_engine()
  local log = { charges = 0, refunds = {} }
  eng:register(M.order_def(log))
  return eng, log, db
end

-- Starts a run of the order and lets it charge (or reuse a charge) and wait (1 s): its id.
function M.start(eng, order)
  local id = eng:start("order", { order = order })
  eng:advance(1)
  return id
end

-- The engine on db again, as after a restart: the order workflow registered on the same log,
-- the runs in flight recovered.
function M.restart(db, log)
  local eng = H.reopen(db)
  eng:register(M.order_def(log))
  eng:recover()
  return eng
end

return M
