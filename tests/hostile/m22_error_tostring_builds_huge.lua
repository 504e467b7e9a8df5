-- expect: needs_attention __tostring failed
-- budget: 2000000000
-- A __tostring that builds a huge string: the step's large budget is not the __tostring's.
return { name = "m22_error_tostring_builds_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  error(setmetatable({}, { __tostring = function() return string.rep("z", 40 << 20) .. string.rep("z", 40 << 20) end }))
end } } }
