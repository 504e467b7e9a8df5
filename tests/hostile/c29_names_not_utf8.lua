-- expect: load its name is not valid UTF-8
-- Names that JSON cannot hold are refused at load, not found broken in a run's row later.
return { name = "c29\xff", steps = { { name = "s\xfe", execute = function() error("x\xff") end } } }
