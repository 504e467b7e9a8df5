-- expect: load workflow.name is not UTF-8 text
-- Names that JSON cannot hold are refused at load, not found broken in a run's row later.
return { name = "c29\xff", steps = { { name = "s\xfe", execute = function() error("x\xff") end } } }
