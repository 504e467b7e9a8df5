-- expect: needs_attention step exceeded its instruction budget
local co = coroutine.create(function() while true do end end)
return { name = "f16", steps = { { name = "s", execute = function()
  return coroutine.resume(co)
end } } }
