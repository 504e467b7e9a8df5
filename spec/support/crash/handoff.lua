-- The crash tests' workflow that waits for the world: reserve (an effect), ask (a completion
-- token, handed to the harness through tokens.log in the effect service's directory), ship (a
-- child run of crash_parcel, spec/support/crash/parcel.lua) and charge (an effect, declined on
-- demand, so that the run compensates its succeeded child). The harness completes the tokens,
-- some twice and some of earlier attempts, while it kills the workers; the audit checks that
-- each step took the one completion accepted for its last attempt, and that the child ran once
-- and was compensated with its parent.
local mend = require "mend"
local effects = require "spec.support.effects"

local function effect(name, opts)
  opts = opts or {}
  return {
    name = name,
    execute = function(ctx, input)
      mend.sleep(0.002)
      if opts.last and input.fail then error(mend.fatal("declined")) end
      effects.call(input.dir, "apply", ctx, ctx.idempotency_key)
      return { step = name, n = input.n }
    end,
    compensate = function(ctx)
      effects.call(ctx.input.dir, "undo", ctx, ctx.idempotency_key)
    end,
  }
end

return {
  name = "crash_handoff",
  retry = { initial = 0.005, max_delay = 0.02, jitter = 0.5, max_attempts = 20 },
  compensate_retry = { initial = 0.005 },
  steps = {
    effect("reserve"),
    { name = "ask", wait = "token", timeout = 3600,
      execute = function(ctx, input)
        local token = ctx:token()
        local f = assert(io.open(input.dir .. "/tokens.log", "a"))
        f:write(ctx.run_id, " ", ctx.attempt, " ", token, "\n")
        f:close()
      end },
    { name = "ship", child = "crash_parcel",
      input = function(ctx) return { dir = ctx.input.dir, n = ctx.input.n } end },
    effect("charge", { last = true }),
  },
}
