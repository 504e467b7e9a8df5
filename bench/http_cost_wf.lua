-- bench/http_cost_wf.lua: bench/http_cost.lua's workflow as a file, for an engine with a Lua
-- state of its own (MEND_COST_OWN=1), which loads its workflows rather than being handed
-- functions of the host's state: the same step, its URL and concurrency taken from the
-- environment that bench/http_cost.sh gives http_cost.lua.
local mend = require("mend")
local url = assert(os.getenv("MEND_COST_URL"), "MEND_COST_URL is not set")
local c = tonumber(os.getenv("MEND_COST_C") or "64")
return { name = "call", steps = { {
  name = "post",
  breaker = { key = "nginx", max_concurrency = c },
  execute = function(ctx)
    return mend.http{ method = "POST", url = url, json = ctx.input }.status
  end } } }
