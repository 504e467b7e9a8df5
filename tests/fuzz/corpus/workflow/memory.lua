local t = {} while true do t[#t + 1] = ("x"):rep(1000) end
