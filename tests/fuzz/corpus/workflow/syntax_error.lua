return { name = "x", steps = { { name = } }
