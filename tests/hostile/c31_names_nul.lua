-- expect: load holds a NUL byte
-- Names are C strings in the engine: "s\0t" and "s\0u" were both taken for "s" (and a workflow
-- "benign\0x" for "benign"); a NUL byte in a name is refused.
return { name = "c31_names_nul", steps = { { name = "s\0t", execute = function() return 1 end },
  { name = "s\0u", execute = function() return 1 end } } }
