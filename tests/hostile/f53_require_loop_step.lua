-- expect: needs_attention "reason":"workflow_error"
-- The same module required in a step: the step's budget ends it, a workflow_error.
return { name = "f53_require_loop_step", steps = { { name = "s", execute = function() require "mods.spin" end } } }
