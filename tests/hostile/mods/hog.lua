-- A module of hostile/m10: fills memory as it loads.
local big, t = string.rep("z", 1 << 20), {}
for i = 1, 1e9 do t[i] = big .. i end
