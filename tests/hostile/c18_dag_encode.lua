-- expect: needs_attention step exceeded its instruction budget
-- mend.json.encode of a DAG of 2^40 paths, charged as it goes: it ran 0.9 s to the bound of 1M
-- values before it was charged its text.
local mend = require "mend"
return { name = "c18_dag_encode", steps = { { name = "s", execute = function()
  local t = { 1 }
  for i = 1, 40 do t = { t, t } end
  return #mend.json.encode(t)
end } } }
