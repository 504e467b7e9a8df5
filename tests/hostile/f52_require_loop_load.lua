-- expect: load workflow file exceeded its instruction budget
-- A module beside the workflow that loops as it loads, required at load: the load's budget ends it.
require "mods.spin"
return { name = "f52_require_loop_load", steps = { { name = "s", execute = function() return 1 end } } }
