-- expect: load workflow file exceeded its instruction budget (10000000 instructions) while it loaded
while true do end
