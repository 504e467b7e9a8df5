-- One request of examples/tcp_server.c: parse the line, look its argument up through the
-- server's asynchronous "lookup" host function (answered from the server's libuv loop, as a
-- network call would be), and build the reply.
--
-- Input: { line = "GET apples", client = 3 }
local mend = require "mend"

return {
  name = "request",
  retry = { max_attempts = 3, initial = 0.01 },
  steps = {
    { name = "parse",
      execute = function(ctx, input)
        local verb, arg = input.line:match("^(%S+)%s*(.-)%s*$")
        if not verb then error(mend.fatal("empty request")) end
        return { verb = verb, arg = arg }
      end },
    { name = "lookup",
      execute = function(ctx)
        return mend.call("lookup", ctx.results.parse.arg)
      end },
    { name = "reply",
      execute = function(ctx)
        return { text = ctx.results.parse.verb .. " " .. ctx.results.lookup.length }
      end },
  },
}
