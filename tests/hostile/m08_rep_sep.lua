-- expect: needs_attention step exceeded the memory limit
-- budget: 2000000000
-- string.rep with a separator, 33 MiB a call, kept: the memory limit ends it.
return { name = "m08_rep_sep", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local t = {}
  for i = 1, 100 do t[i] = string.rep("ab", 1 << 20, string.rep(",", 30)) end
end } } }
