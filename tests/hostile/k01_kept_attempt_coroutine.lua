-- expect: succeeded cannot resume the coroutine of a step's attempt
-- runs: 2
-- The first run keeps its attempt's coroutine where the second run's step finds it (the
-- workflow's globals) and sleeps; the second tries to resume and to close it, which would end
-- the first run's attempt early. Both runs must succeed, the first after its whole sleep.
local mend = require "mend"
return { name = "k01", steps = { { name = "k01", execute = function()
  if not kept then
    kept = coroutine.running()
    mend.sleep(0.2)
    return { slept = true, kept_status = coroutine.status(kept) }
  end
  local _, resumed = coroutine.resume(kept)
  local _, closed = coroutine.close(kept)
  return { resumed = tostring(resumed), closed = tostring(closed) }
end } } }
