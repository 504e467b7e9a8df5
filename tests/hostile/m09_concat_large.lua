-- expect: needs_attention step exceeded the memory limit
-- budget: 2000000000
-- table.concat of 100 strings of 1 MiB: over the memory limit in one call.
return { name = "m09_concat_large", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local big, t = string.rep("y", 1 << 20), {}
  for i = 1, 100 do t[i] = big end
  return #table.concat(t)
end } } }
