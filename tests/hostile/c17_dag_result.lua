-- expect: needs_attention step exceeded its instruction budget (10000000 instructions) as its result was encoded
-- A DAG of 2^40 paths: its encoding is charged to the step's budget, which stops it long
-- before the bound of 1M values that holds an engine without a budget.
return { name = "c17_dag_result", steps = { { name = "s", execute = function()
  local t = { 1 }
  for i = 1, 40 do t = { t, t } end
  return t
end } } }
