-- expect: succeeded "n":12582912
-- budget: 100000000
-- In an engine of its own, so that this is the first lauxlib buffer its state makes: Lua then
-- creates the buffers' metatable between the box and its block, and a block of 24 * 2^19 bytes
-- (a 12 MiB string.rep) was refused as the node vector of a table of 2^19 keys.
return { name = "h04_first_buffer_of_state", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  local s = string.rep("x", 12 << 20)
  return { n = #s }
end } } }
