-- expect: load workflow name is missing
return setmetatable({}, { __index = function() error("boom") end })
