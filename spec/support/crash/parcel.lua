-- The child run of the crash tests' crash_handoff (spec/support/crash/handoff.lua): two steps
-- with effects in the effect service, compensated as a whole when its parent compensates.
local mend = require "mend"
local effects = require "spec.support.effects"

local function effect(name)
  return {
    name = name,
    execute = function(ctx, input)
      mend.sleep(0.002)
      effects.call(input.dir, "apply", ctx, ctx.idempotency_key)
      return { step = name, n = input.n }
    end,
    compensate = function(ctx)
      mend.sleep(0.002)
      effects.call(ctx.input.dir, "undo", ctx, ctx.idempotency_key)
    end,
  }
end

return {
  name = "crash_parcel",
  retry = { initial = 0.005, max_delay = 0.02, jitter = 0.5 },
  compensate_retry = { initial = 0.005 },
  steps = { effect("pack"), effect("label") },
}
