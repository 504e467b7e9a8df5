-- expect: succeeded "clean":true
local mend = require "mend"
return { name = "z01_victim", steps = { { name = "s", execute = function()
  local clean = shared_secret == nil and string.upper("a") == "A" and table.concat({ "a", "b" }) == "ab"
    and math.pi > 3.14 and ("x"):upper() == "X" and getmetatable("") == false
    and mend.is_error(mend.fatal("x")) == "fatal"
  return { clean = clean }
end } } }
