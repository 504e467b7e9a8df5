-- expect: needs_attention step exceeded its instruction budget
-- __close handlers that raise and loop, under a pcall in a loop: the budget still ends it.
return { name = "f51_close_raise_loop", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local function f()
    local a <close> = setmetatable({}, { __close = function() while true do end end })
    local b <close> = setmetatable({}, { __close = function() error("b") end })
    error("body")
  end
  while true do pcall(f) end
end } } }
