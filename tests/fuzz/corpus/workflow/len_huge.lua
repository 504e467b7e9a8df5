return { name = "x", steps = setmetatable({}, { __len = function() return 1e9 end }) }
