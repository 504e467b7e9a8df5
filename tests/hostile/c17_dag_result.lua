-- expect: failed cannot encode more than 1048576 values
return { name = "c17_dag_result", steps = { { name = "s", execute = function()
  local t = { 1 }
  for i = 1, 40 do t = { t, t } end
  return t
end } } }
