-- expect: succeeded "ok":true
local mend = require "mend"
return { name = "e20_rawset_G", steps = { { name = "s", execute = function(ctx, input)
  rawset(_G, "shared_secret", 42); string.upper = nil; table.concat = nil; math.pi = 3
  return { ok = true }
end } } }
