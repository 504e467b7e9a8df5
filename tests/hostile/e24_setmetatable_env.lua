-- expect: succeeded "own":1
-- A workflow that locks its own environment at load changes nothing for the engine or others.
setmetatable(_ENV, { __index = function(_, k) error("no global " .. tostring(k)) end,
                     __newindex = function() error("read-only") end })
local tostring, string = tostring, string
return { name = "e24_setmetatable_env", steps = { { name = "s", execute = function()
  return { own = 1 }
end } } }
