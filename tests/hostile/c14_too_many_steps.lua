-- expect: load over the most a workflow may have
local steps = {}
for i = 1, 10001 do steps[i] = { name = "s" .. i, execute = function() end } end
return { name = "c14", steps = steps }
