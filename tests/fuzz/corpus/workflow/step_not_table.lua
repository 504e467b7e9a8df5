return { name = "x", steps = { "charge" } }
