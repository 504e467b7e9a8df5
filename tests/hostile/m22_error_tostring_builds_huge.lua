-- expect: needs_attention __tostring failed: exceeded the memory limit (67108864 bytes)
-- budget: 2000000000
-- A __tostring that allocates what the state has left, after a step that kept 60 MiB: the
-- message names the limit, not the "not enough memory" lauxlib raised.
local kept = {}
return { name = "m22_error_tostring_builds_huge", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  for i = 1, 60 do kept[i] = string.rep("k", 1 << 20) end
  error(setmetatable({}, { __tostring = function() return string.rep("z", 4 << 20) end }))
end } } }
