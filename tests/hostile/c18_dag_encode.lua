-- expect: failed cannot encode more than 1048576 values
local mend = require "mend"
return { name = "c18_dag_encode", steps = { { name = "s", execute = function()
  local t = { 1 }
  for i = 1, 40 do t = { t, t } end
  return #mend.json.encode(t)
end } } }
