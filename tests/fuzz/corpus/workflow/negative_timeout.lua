return { name = "x", steps = { { name = "a", execute = function() end, timeout = -1 } } }
