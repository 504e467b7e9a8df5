return load("return { name = 1 }", "x", "b")()
