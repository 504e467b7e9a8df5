-- expect: load exceeded the memory limit (67108864 bytes) while it loaded
local s = string.rep("x", 1 << 30)
