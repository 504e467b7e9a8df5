-- A module of hostile/m10: fills memory as it loads.
local t = {}
for i = 1, 1e9 do t[i] = string.rep("z", 1000) .. i end
