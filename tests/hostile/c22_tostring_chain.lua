-- expect: failed C stack overflow
-- A __tostring that calls tostring on itself: C recursion, stopped by Lua's C-stack bound.
return { name = "c22_tostring_chain", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local mt = {}
  mt.__tostring = function(x) return tostring(x) end
  return tostring(setmetatable({}, mt))
end } } }
