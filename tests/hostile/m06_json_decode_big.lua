-- expect: failed mend.json.decode: a text of 6000003 bytes, over the sandbox
-- budget: 100000000
local mend = require "mend"
return { name = "m06_json_decode_big", steps = { { name = "s", execute = function(ctx, input)
  return #mend.json.decode("[" .. string.rep("1,", 3e6) .. "1]")
end } } }
