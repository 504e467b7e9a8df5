-- expect: load max_attempts must be an integer
return { name = "c13", retry = { max_attempts = 2^31 }, steps = { { name = "s", execute = function() end } } }
