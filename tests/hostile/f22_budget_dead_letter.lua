-- expect: needs_attention "reason":"workflow_error"
return { name = "f22", steps = {
  { name = "done", execute = function() return 1 end, compensate = function() error("not now") end },
  { name = "spin", execute = function() while true do end end } } }
