-- expect: load workflow file exceeded its instruction budget
while true do pcall(function() while true do end end) end
