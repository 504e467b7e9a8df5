-- bench/http_cost.lua URL N C DB: the mend half of W9 alone (N runs of one step POSTing a small
-- JSON body through mend.http, at most C in flight), for bench/http_cost.sh to count its
-- instructions under callgrind. Checks nothing and times nothing: run.lua's W9 does that.
local mend = require("mend")
local url, n, c, db = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4]
for _, suffix in ipairs({ "", "-wal", "-shm" }) do os.remove(db .. suffix) end
local eng = mend.engine{ db = db, durability = "process", clock = "real", seed = 1,
                         park_after = -1 }
eng:register{ name = "call", steps = { {
  name = "post",
  breaker = { key = "nginx", max_concurrency = c },
  execute = function(ctx)
    return mend.http{ method = "POST", url = url, json = ctx.input }.status
  end } } }
for i = 1, n do eng:start("call", { i = i }) end
eng:run()
eng:close()
