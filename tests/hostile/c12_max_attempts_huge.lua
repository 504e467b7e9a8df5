-- expect: load max_attempts must be an integer
return { name = "c12", retry = { max_attempts = 1e300 }, steps = { { name = "s", execute = function() end } } }
