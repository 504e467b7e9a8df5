-- A refund that waits for a person's approval: open the refund case (the amount is set aside),
-- ask a person, handing them a completion token, and wait up to 48 hours for their answer;
-- then pay the refund. A rejection fails the token, and the saga turns back: the amount set
-- aside is released. If two days pass with no answer, the wait fails with a `timeout` error
-- and the run compensates the same way.
--
--   id=$(mend start approval --input '{"order":"o-1","amount":25}')
--   mend worker &                      -- the approve step logs its token; mend status $id
--   mend complete TOKEN --result '{"by":"alice"}'                      -- approved: refunded
--   mend fail TOKEN --kind fatal --message "not eligible"              -- rejected: released
--
-- The token is 128 random bits, good for this attempt only and for one answer. While the run
-- waits it holds no coroutine, and no worker needs to be running: the answer is kept and taken
-- by whichever worker carries the run on. In the REPL, `complete(token, {by = "alice"})`, or
-- `advance(48 * 3600)` to let the two days pass at once on the virtual clock.
--
-- Input: { order = "o-1", amount = 25 }

return {
  name = "approval",

  steps = {
    { name = "open",
      execute = function(ctx, input)
        ctx:log("refund of %s for order %s set aside", input.amount, input.order)
        return { order = input.order, amount = input.amount, case = "rf-" .. ctx.run_id }
      end,
      compensate = function(ctx, case)
        ctx:log("refund case %s closed: %s released", case.case, case.amount)
      end },

    -- execute hands the token out (here to the log; in practice an e-mail, a ticket, a
    -- message to a back office), then the step waits for it to be completed or failed. The
    -- store keeps only its digest, and the history this log line with the token masked.
    { name = "approve", wait = "token", timeout = 48 * 3600,
      retry = { max_attempts = 1 },   -- no answer in two days: turn back, do not ask again
      execute = function(ctx, input)
        local token = ctx:token()
        ctx:log("approval of the refund of %s (order %s) requested: mend complete %s, or mend"
                .. " fail %s --kind fatal", input.amount, input.order, token, token)
      end },

    { name = "refund",
      execute = function(ctx, input)
        local by = (ctx.results.approve or {}).by or "?"
        ctx:log("refund of %s for order %s paid, approved by %s", input.amount, input.order, by)
        return { refunded = input.amount, approved_by = by }
      end },
  },
}
