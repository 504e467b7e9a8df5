-- mend.listen: the HTTP API of `mend serve` and `mend worker --listen` (docs/http-api.md) as
-- the CLI starts it: reads the token file, finds the dashboard's page, starts the server of
-- mend.serve (the C module the mend program opens) on an engine's loop, and closes it before
-- the engine. Holds no server logic of its own, and never reads the database.

local M = {}

-- The dashboard's page, installed beside mend's Lua files (share/mend/ui, ui/ in the source
-- tree); nil when it is not there (the API is served without it). A page holding no whole
-- script (cut short, or mangled) would be a blank dashboard the browser says nothing about:
-- it is not served, and stderr says why, naming the file. file: the page's path (the installed
-- one when nil).
function M.dashboard_page(file)
  if not file then
    local cli_file = package.searchpath("mend.cli", package.path)
    if not cli_file then return nil end
    file = (cli_file:gsub("[^/]*/[^/]*$", "")) .. "../ui/index.html"
  end
  local f = io.open(file, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  local scripts, foreign = 0, false
  if text then scripts, foreign = require("mend.serve").scripts(text) end
  if foreign then
    io.stderr:write(("mend: warning: the dashboard's page %s holds an <svg> or <math> element, " ..
                     "whose scripts its Content-Security-Policy cannot be made for (draw it " ..
                     "from the page's script): the dashboard is not served, the API is\n")
                    :format(file))
    return nil
  elseif scripts == 0 then
    io.stderr:write(("mend: warning: the dashboard's page %s holds no whole <script> element " ..
                     "(cut short?): the dashboard is not served, the API is\n"):format(file))
    return nil
  end
  return text
end

-- The token of --token-file (nil when not given); a file that cannot be read, or holds a token
-- too short, is the command's failure, naming the file.
function M.token(o, cli)
  if not o["token-file"] then return nil end
  local f, err = io.open(o["token-file"], "rb")
  if not f then cli.fail("cannot read --token-file: %s", err) end
  local text, rerr = f:read("a")
  f:close()
  -- a folder opens but cannot be read: say so, not that its token is empty
  if not text then cli.fail("cannot read --token-file: %s: %s", o["token-file"], rerr) end
  local token = text:match("^%s*(.-)%s*$")
  if #token < 16 then
    cli.fail("the token in %s is %s: it must be at least 16 characters", o["token-file"],
             #token == 0 and "empty" or "too short")
  end
  return token
end

-- The server's options from the command's flags (listen, token-file, max-body, cors), checked
-- before anything is opened. cli: the CLI's fail, usage_error and out, so that a bad flag is
-- reported as the CLI reports its own.
function M.options(o, cli)
  local token = M.token(o, cli)
  -- decimal only, as the CLI's other numbers: tonumber took 0x10 as 16 bytes
  local mb = o["max-body"]
  local max_body = mb and mb:find("^[%d.eE+-]+$") and math.tointeger(tonumber(mb))
  if o["max-body"] and not (max_body and max_body > 0) then
    cli.usage_error(o._command, "--max-body must be a whole number of bytes > 0, got %s", o["max-body"])
  end
  local opts = { address = o.listen or "127.0.0.1:7070", token = token, max_body = max_body,
                 cors = o.cors, dashboard = M.dashboard_page(), process = "mend " .. o._command }
  local ok, err = require("mend.serve").check(opts)
  -- a malformed address, one beyond loopback without a token, a --cors not one origin: the
  -- flags' fault
  if not ok then cli.usage_error(o._command, "%s", err) end
  return opts
end

-- Calls fn(server) with the API listening on eng's loop and closes the server, whatever fn
-- does.
function M.with_listener(eng, opts, fn, cli)
  local srv, err = require("mend.serve").listen(eng, opts)
  if not srv then cli.fail("%s", err) end   -- the system's refusal: a port in use, ...
  cli.out("mend: serving http://%s/api/v1\n", srv:address())
  io.stdout:flush()
  local res = table.pack(pcall(fn, srv))
  srv:close()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

return M
