-- expect: load steps must be a non-empty list
return { name = "c09_steps_len", steps = setmetatable({}, { __len = function() return 1e9 end }) }
