-- expect: load workflow file exceeded its instruction budget
-- A goto loop at the top level: the load's budget ends it.
::top:: do local x = 1 end goto top
