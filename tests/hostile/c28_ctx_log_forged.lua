-- expect: succeeded "forger":true
-- ctx:log wrote in the history of the run ctx.run_id named: a step that set it, or passed a
-- table of its own as ctx, wrote in any run's history (here a benign run's, ctx.input.victim).
return { name = "c28_ctx_log_forged", steps = { { name = "s", execute = function(ctx, input)
  ctx.log({ run_id = input.victim, step = "one", attempt = 1 }, "forged %s", "row")
  ctx.run_id = input.victim
  ctx:log("forged again")
  local co = coroutine.wrap(function() ctx:log("from a coroutine of its own") end)
  co()
  return { forger = true }
end } } }
