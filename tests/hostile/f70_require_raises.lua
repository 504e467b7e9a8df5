-- expect: needs_attention step exceeded its instruction budget
-- A module that raises as it loads is kept by nobody: read from disk and compiled again at each
-- require, 8 KB of text, charged only the loop's few instructions (0.49 s for a budget of 10M).
return { name = "f70_require_raises", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  while true do pcall(require, "mods.raises") end
end } } }
