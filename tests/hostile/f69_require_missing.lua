-- expect: needs_attention step exceeded its instruction budget
-- require of a module that is not there: a look on disk and a message, charged only the loop's
-- few instructions (0.54 s of CPU for a budget of 10M).
return { name = "f69_require_missing", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  while true do pcall(require, "mods.missing") end
end } } }
