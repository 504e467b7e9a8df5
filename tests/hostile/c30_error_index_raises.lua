-- expect: failed error object is a table value
-- An error object whose __index raises and whose __name is not a string: read raw, never run.
return { name = "c30_error_index_raises", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  error(setmetatable({}, { __index = function() error("idx") end, __name = {}, __len = function() while true do end end,
                           __eq = function() while true do end end, __concat = function() while true do end end }))
end } } }
