return { name = "x", retry = { strategy = "random" }, steps = { { name = "a", execute = function() end } } }
