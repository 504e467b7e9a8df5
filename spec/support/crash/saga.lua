-- The saga the crash tests kill workers under: three steps with real effects in an external
-- service (spec/support/effects.lua), short real waits so that kills land inside attempts,
-- a retry on demand and a fatal last step on demand so that compensation is crashed too.
-- input.fast leaves the waits out: hundreds of runs then move in step, and the worker hands
-- its large batches to the writer thread. The middle steps are the branches of a parallel
-- group, and a map over three items follows it, so that kills land inside groups and maps too
-- (their compensation order is the history's).
local mend = require "mend"
local effects = require "spec.support.effects"

local function step(name, opts)
  opts = opts or {}
  return {
    name = not opts.item and name or nil,   -- a map's step is named by its items
    execute = function(ctx, input)
      if opts.item then input = ctx.input end   -- the second argument is the item
      if not input.fast then mend.sleep(0.002) end
      if opts.flaky and input.flaky and ctx.attempt == 1 then
        error(mend.retryable("flaky on first attempt"))
      end
      if opts.last and input.fail then error(mend.fatal("declined")) end
      effects.call(input.dir, "apply", ctx, ctx.idempotency_key)
      if not input.fast then mend.sleep(0.002) end
      return { step = name, n = input.n }
    end,
    compensate = function(ctx, result)
      if not ctx.input.fast then mend.sleep(0.002) end
      effects.call(ctx.input.dir, "undo", ctx, ctx.idempotency_key)
    end,
  }
end

return {
  name = "crash_saga",
  retry = { initial = 0.005, max_delay = 0.02, jitter = 0.5 },
  compensate_retry = { initial = 0.005 },
  -- many runs fail once at "charge": its breaker opens and half-opens often, across crashes too
  breaker = { open_seconds = 0.05 },
  steps = { step("reserve"),
            { name = "prepare", parallel = { step("charge", { flaky = true }), step("pack") } },
            { name = "items", max_concurrency = 2, map = function() return { 1, 2, 3 } end,
              step = step("items", { item = true }) },
            step("ship", { last = true }) },
}
