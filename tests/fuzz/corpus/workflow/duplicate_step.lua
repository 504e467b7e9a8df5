return { name = "x", steps = { { name = "a", execute = function() end }, { name = "a", execute = function() end } } }
