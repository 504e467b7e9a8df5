-- expect: load __tostring failed
error(setmetatable({}, { __tostring = function() error("boom") end }))
