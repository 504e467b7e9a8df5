return { name = "x", retry = { max_attempts = 1.5 }, steps = { { name = "a", execute = print } } }
