-- expect: load workflow.name is 4194304 bytes long, over the longest name of 512 bytes
-- A name of 4 MiB loaded, then no run of it could be started (a host's buffer cut it short).
return { name = string.rep("n", 4 << 20), steps = { { name = "s", execute = function() return 1 end } } }
