-- bench/http_cost.lua URL N C DB: the mend half of W9 alone (N runs of one step POSTing a small
-- JSON body through mend.http, at most C in flight), for bench/http_cost.sh to count its
-- instructions under callgrind. Checks nothing and times nothing: run.lua's W9 does that.
local mend = require("mend")
local url, n, c, db = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4]
for _, suffix in ipairs({ "", "-wal", "-shm" }) do os.remove(db .. suffix) end
-- MEND_COST_OWN=1: an engine with a Lua state of its own (memory_limit, as the C API's, a
-- sandbox's and every C host's), which loads the same step from http_cost_wf.lua.
local own = os.getenv("MEND_COST_OWN") == "1"
local eng = mend.engine{ db = db, durability = "process", clock = "real", seed = 1,
                         park_after = -1, memory_limit = own and (1 << 30) or nil }
if own then
  eng:load((arg[0]:match("^(.*)/") or ".") .. "/http_cost_wf.lua")
else
  eng:register{ name = "call", steps = { {
    name = "post",
    breaker = { key = "nginx", max_concurrency = c },
    execute = function(ctx)
      return mend.http{ method = "POST", url = url, json = ctx.input }.status
    end } } }
end
for i = 1, n do eng:start("call", { i = i }) end
eng:run()
eng:close()
