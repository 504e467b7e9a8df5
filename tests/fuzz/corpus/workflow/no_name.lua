return { steps = { { name = "a", execute = function() end } } }
