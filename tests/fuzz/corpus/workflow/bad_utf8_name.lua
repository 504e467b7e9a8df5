return { name = "x", steps = { { name = "\xff", execute = function() end } } }
