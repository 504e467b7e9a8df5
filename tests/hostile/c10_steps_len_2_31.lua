-- expect: load steps must be a non-empty list
return { name = "c10", steps = setmetatable({}, { __len = function() return 2^31 end }) }
