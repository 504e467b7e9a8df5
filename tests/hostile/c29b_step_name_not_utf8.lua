-- expect: load .name is not UTF-8 text
-- A step's name that JSON cannot hold is refused at load, as the workflow's is (c29).
return { name = "c29b", steps = { { name = "s\xfe", execute = function() return 1 end } } }
