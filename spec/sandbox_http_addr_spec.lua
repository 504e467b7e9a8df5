-- mend.http under an allow-list, to a name the allow-list allows that leads to an address of the
-- engine's own machine or link (loopback, unspecified, link-local, IPv4-mapped forms of these):
-- refused at the address curl connects to, a fatal error naming the host and the address,
-- unless the allow-list names that address or localhost. curl resolves "localhost" and any name
-- under it to loopback without DNS, so these specs need no DNS of their own. An environment proxy is the host's: its address is allowed, and the
-- target's name is what the allow-list checks (src/engine/http_addr.c).
local mend = require "mend"
local H = require "spec.helper"

local server = {}

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function script(tbl)
  write(server.script_path, mend.json.encode(tbl))
  write(server.log_path, "")
end

local function seen()
  local out = {}
  for line in io.lines(server.log_path) do out[#out + 1] = mend.json.decode(line) end
  return out
end

local CALLER = [==[
local mend = require "mend"
return { name = "caller", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function(ctx)
  local res = mend.http(ctx.input)
  return { status = res.status }
end } } }
]==]

local function call(url, allow, sandbox)
  local eng = H.new_engine({ sandbox = sandbox ~= false, memory_limit = 32 << 20, http_allow = allow })
  eng:load(H.write_file(H.tmp_dir(), "caller.lua", CALLER))
  local id = eng:start("caller", { url = url })
  eng:run()
  return eng:status(id)
end

local function refused(st, host, address)
  assert.are.equal("failed", st.status)
  local e = st.steps[1].error
  assert.is_truthy(e:find(('host "%s" is at address %s'):format(host, address), 1, true), e)
end

describe("mend.http's connections under http_allow", function()
  setup(function()
    server.script_path, server.log_path = os.tmpname(), os.tmpname()
    local p = assert(io.popen("python3 tests/http_server.py " .. server.script_path .. " "
                              .. server.log_path .. " & echo", "r"))
    local line = p:read("l")
    while line == "" do line = p:read("l") end
    local port, pid = tostring(line):match("^(%d+) (%d+)$")
    assert(port, "the test server did not start: " .. tostring(line))
    server.port, server.pid, server.pipe = tonumber(port), tonumber(pid), p
  end)
  teardown(function()
    if server.pid then os.execute("kill " .. server.pid) end
    if server.pipe then server.pipe:close() end
    os.remove(server.script_path)
    os.remove(server.log_path)
  end)
  after_each(H.cleanup)

  it("refuses a wildcard's name that resolves to loopback, sandboxed or not", function()
    script({ ["/a"] = { { status = 200 } } })
    for _, sandbox in ipairs { true, false } do
      local st = call("http://api.localhost:" .. server.port .. "/a", { "*.localhost" }, sandbox)
      assert.are.equal("failed", st.status)
      local e = st.steps[1].error
      assert.is_truthy(e:find('host "api.localhost" is at address ', 1, true), e)
      assert.is_truthy(e:find("127.0.0.1", 1, true) or e:find("::1", 1, true), e)
    end
    assert.are.equal(0, #seen())
  end)

  -- A wildcard names hosts under a domain: "*.0.0.1" is not a domain of 127.0.0.1 (nor "*.8.8"
  -- of Google's resolver), so it matches no address written as one, in any of its forms.
  it("matches no address's text with a wildcard: refused before any connection", function()
    script({ ["/a"] = { { status = 200 } } })
    for _, case in ipairs {
      { "127.0.0.1", "*.0.0.1" }, { "0.0.0.0", "*.0.0" }, { "[::ffff:127.0.0.1]", "*.0.0.1]" },
      { "10.0.0.1", "*.0.1" }, { "2130706433", "*.2130706433" }, { "127.1", "*.1" } } do
      local st = call("http://" .. case[1] .. ":" .. server.port .. "/a", { case[2] })
      assert.are.equal("failed", st.status)
      local e = st.steps[1].error
      assert.is_truthy(e:find(" is not allowed (http_allow: " .. case[2], 1, true), case[1] .. ": " .. e)
    end
    assert.are.equal(0, #seen())
  end)

  it("connects to an address the allow-list names, or to loopback when it names localhost", function()
    script({ ["/a"] = { { status = 200 } } })
    local url = "http://api.localhost:" .. server.port .. "/a"
    assert.are.equal("succeeded", call(url, { "*.localhost", "127.0.0.1" }).status)
    assert.are.equal("succeeded", call(url, { "*.localhost", "localhost" }).status)
    assert.are.equal("succeeded",
                     call("http://[::ffff:127.0.0.1]:" .. server.port .. "/a", { "[::ffff:127.0.0.1]" }).status)
    assert.are.equal(3, #seen())
  end)

  it("takes an environment proxy's address, and checks the target's name", function()
    -- The proxy (the test server on 127.0.0.1, named by no allow-list) gets the whole URL as
    -- its request's target; the target's name is only the proxy's to resolve.
    local target = "http://api.example.test/a"
    script({ [target] = { { status = 200 } } })
    local dir = H.tmp_dir()
    local wf = H.write_file(dir, "caller.lua", CALLER)
    local code = ([[
      local mend = require "mend"
      local eng = mend.engine { db = %q, sandbox = true, memory_limit = 32 << 20, http_allow = { %q } }
      eng:load(%q)
      local id = eng:start("caller", { url = %q })
      eng:run()
      local st = eng:status(id)
      io.write(st.status, " ", tostring(st.steps[1].error))
      eng:close()
    ]]):format(dir .. "/p.db", "*.example.test", wf, target)
    H.write_file(dir, "proxied.lua", code)
    local env = "env -u no_proxy -u NO_PROXY http_proxy=http://127.0.0.1:" .. server.port .. " "
    local _, out = H.shell(env .. "lua " .. dir .. "/proxied.lua")
    assert.are.equal("succeeded nil", out)
    assert.are.equal(1, #seen())
    -- a name outside the allow-list is refused before any connection, proxy or not
    H.write_file(dir, "proxied.lua", (code:gsub("%*%.example%.test", "other.test")))
    _, out = H.shell(env .. "lua " .. dir .. "/proxied.lua")
    assert.is_truthy(out:find('host "api.example.test" is not allowed', 1, true), out)
    assert.are.equal(1, #seen())
  end)
end)
