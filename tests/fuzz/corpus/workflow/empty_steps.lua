return { name = "x", steps = {} }
