return { name = "x", [1] = true, steps = { { name = "a", execute = function() end } } }
