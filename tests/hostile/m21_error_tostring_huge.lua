-- expect: failed yyyyyyyy
-- budget: 2000000000
-- A __tostring that returns a 30 MiB string the step made beforehand: within the __tostring's
-- own small limits, and the run keeps the start of it.
local big
return { name = "m21_error_tostring_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  big = string.rep("y", 30 << 20)
  error(setmetatable({}, { __tostring = function() return big end }))
end } } }
