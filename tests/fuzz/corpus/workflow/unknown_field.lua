return { name = "x", steps = { { name = "a", execute = function() end, compensat = function() end } } }
