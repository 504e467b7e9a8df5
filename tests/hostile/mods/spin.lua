-- A module of hostile/f52 and f53: loops as it loads.
while true do end
