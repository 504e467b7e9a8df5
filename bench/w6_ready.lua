-- bench/w6_ready.lua DB [DURABILITY]: W6's "ready" alone, for a count of instructions or of
-- system calls that the machine's load does not move (bench/w6_ready.sh runs it). Opens DB,
-- a copy of a killed W6 victim's database, recovers it as W6 does, starts one new run, and
-- exits the process as that run's step executes: what W6's ready_s measures, without the
-- rest of the recovered runs.
local mend = require("mend")
local db, durability = arg[1], arg[2] or "process"
local eng = mend.engine{ db = db, durability = durability, clock = "real", seed = 1 }
local function done() return true end
eng:register{ name = "inflight", steps = { { name = "first", execute = done },
                                           { name = "second", execute = done } } }
eng:register{ name = "fresh", steps = { { name = "only", execute = function() os.exit(0) end } } }
io.stderr:write("recovered ", eng:recover(), "\n")
eng:start("fresh", {})
eng:run()
error("the new run never executed")
