-- The crash tests' waiting workflow: five waits in a row for the event "tick", each taking the
-- oldest one not yet taken, then a step that returns what they took. The harness sends the
-- ticks (some twice, with the same key) while it kills the workers; the audit checks that run
-- k's wait i took tick i, once.
local steps = {}
for i = 1, 5 do
  -- a timeout that never comes: the parked runs wait with a due time, as most real waits do
  steps[i] = { name = "w" .. i, wait_for = "tick", timeout = 3600 }
end
steps[6] = { name = "taken", execute = function(ctx)
  local got = {}
  for i = 1, 5 do got[i] = ctx.results["w" .. i].n end
  return got
end }

return { name = "crash_events", steps = steps }
