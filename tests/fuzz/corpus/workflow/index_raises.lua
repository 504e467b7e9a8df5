return setmetatable({}, { __index = function(t, k) error("no " .. k) end })
