-- The scripted HTTP server of tests/http_server.py on 127.0.0.1, started once for a spec file:
-- script(tbl) says what it answers on each path (and forgets what it saw), seen() the requests
-- it saw since, in order. Must never: outlive the file's teardown (stop).
--
--   local server = require("spec.support.http_server").new()
--   setup(server.start); teardown(server.stop)
--   server.script({ ["/a"] = { { status = 200 } } }); ... server.base .. "/a"; #server.seen()
local mend = require "mend"

local M = {}

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

function M.new()
  local server = {}

  -- Starts the server; server.port, server.base ("http://127.0.0.1:PORT") once it listens.
  function server.start()
    -- not H.tmp_dir(): that is removed after each test, and the server outlives them
    server.script_path, server.log_path = os.tmpname(), os.tmpname()
    local p = assert(io.popen("python3 tests/http_server.py " .. server.script_path .. " "
                              .. server.log_path .. " & echo", "r"))
    local line = p:read("l")
    while line == "" do line = p:read("l") end
    local port, pid = tostring(line):match("^(%d+) (%d+)$")
    assert(port, "the test server did not start: " .. tostring(line))
    server.port, server.pid, server.pipe = tonumber(port), tonumber(pid), p
    server.base = "http://127.0.0.1:" .. port
  end

  function server.stop()
    if server.pid then os.execute("kill " .. server.pid) end
    if server.pipe then server.pipe:close() end
    os.remove(server.script_path)
    os.remove(server.log_path)
  end

  function server.script(tbl)
    write(server.script_path, mend.json.encode(tbl))
    write(server.log_path, "")
  end

  -- The requests the server saw. A line the server is still writing (no newline yet: a read
  -- of a file can see part of a write) is left for the next call.
  function server.seen()
    local f = assert(io.open(server.log_path, "rb"))
    local text = f:read("a")
    f:close()
    local out = {}
    for line in text:gmatch("([^\n]*)\n") do out[#out + 1] = mend.json.decode(line) end
    return out
  end

  return server
end

return M
