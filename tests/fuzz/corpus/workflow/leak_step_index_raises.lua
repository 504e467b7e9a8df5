return { name="x", steps = { setmetatable({name="a"}, {__index=function() error("boom") end}) } }
