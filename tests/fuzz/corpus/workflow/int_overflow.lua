return { name = "x", retry = { max_attempts = 1e300 }, steps = { { name = "a", execute = function() end } } }
