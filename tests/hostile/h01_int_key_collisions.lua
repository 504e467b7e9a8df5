-- expect: needs_attention step made a table of more than 16384 keys
-- Lua hashes integers without a seed: multiples of 2^18 - 1 all fall in one chain of a table
-- of 2^18 slots, and the rehash that grows the table to it walks that chain for every key
-- (20 s in one assignment, on this machine). The sandbox refuses a hash part that large.
return { name = "h01", steps = { { name = "h01", timeout = 0.5, retry = { max_attempts = 1 },
  execute = function()
    local m, t = (1 << 18) - 1, {}
    for j = 1, (1 << 17) + 1 do t[j * m] = true end
    return "not stopped"
  end } } }
