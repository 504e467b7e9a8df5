-- expect: load exceeded the memory limit
-- budget: 2000000000
-- A module beside the workflow that fills memory as it loads, required at load.
require "mods.hog"
return { name = "m10_require_hog", steps = { { name = "s", execute = function() return 1 end } } }
