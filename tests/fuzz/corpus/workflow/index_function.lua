return { name = "x", steps = { setmetatable({ name = "a" }, { __index = function() return function() end end }) } }
