-- expect: failed host \"127.0.0.1\" is not allowed
local mend = require "mend"
return { name = "e23_http_not_allowed", steps = { { name = "s", execute = function(ctx, input)
  -- a sandbox without http_allow calls no host; the refusal is fatal, nothing is sent
  return mend.http{ method = "POST", url = "http://user:pw@127.0.0.1:9/steal", body = "x" }
end } } }
