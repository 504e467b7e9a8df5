-- mend.http from sandboxed workflow code that tries to reach past http_allow or out of the
-- engine's limits: a sandboxed engine (mend.engine{sandbox = true, http_allow = ..., memory_limit
-- = ...}) loading a workflow file whose one step calls mend.http(ctx.input), against the scripted
-- server of tests/http_server.py on 127.0.0.1. What is refused is refused at the call, a fatal
-- error naming it, and the server sees no request.
local H = require "spec.helper"

-- tests/http_server.py, started once for the file; script(tbl) rewrites what it answers
local server = require("spec.support.http_server").new()
local script, seen = server.script, server.seen

local CALLER = [==[
local mend = require "mend"
return { name = "caller", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function(ctx)
  local call = ctx.input
  -- JSON holds no NUL in a key: { name, rest, value } is the header name .. "\0" .. rest
  if call.nul_name then call.headers = { [call.nul_name[1] .. "\0" .. call.nul_name[2]] = call.nul_name[3] } end
  if call.nul_value then call.headers = { [call.nul_value[1]] = call.nul_value[2] .. "\0" .. call.nul_value[3] } end
  call.nul_name, call.nul_value = nil, nil
  local res = mend.http(call)
  return { status = res.status, location = res.headers.location }
end } } }
]==]

-- Runs the caller with `call` as its input in a sandboxed engine allowing `allow`; its status.
local function call(input, allow)
  local dir = H.tmp_dir()
  local eng = H.new_engine({ sandbox = true, memory_limit = 32 << 20,
                             http_allow = allow or { "127.0.0.1" } })
  eng:load(H.write_file(dir, "caller.lua", CALLER))
  local id = eng:start("caller", input)
  eng:run()
  return eng:status(id)
end

local function failed_with(st, text)
  assert.are.equal("failed", st.status)
  assert.is_truthy(st.steps[1].error:find(text, 1, true), st.steps[1].error)
end

describe("mend.http in a sandbox", function()
  setup(server.start)
  teardown(server.stop)
  after_each(H.cleanup)

  it("refuses ca_file: curl would read a file of the host's on the loop's thread", function()
    -- /dev/stdin or a FIFO held the whole engine until its writer closed it (15 s of a pipe
    -- from `sleep 15`), past the step's timeout; any other path was read as a CA bundle.
    script({ ["/a"] = { { status = 200 } } })
    local dir = H.tmp_dir()
    local st = call({ url = server.base .. "/a", ca_file = H.write_file(dir, "ca.pem", "") })
    failed_with(st, "ca_file is not available in a sandbox")
    assert.are.equal(0, #seen())
  end)

  it("refuses a Host header of the call's own: the allow-list is of the hosts requests are for", function()
    script({ ["/a"] = { { status = 200 } } })
    for _, name in ipairs { "Host", "host", "HOST" } do
      local st = call({ url = server.base .. "/a", headers = { [name] = "admin.internal" } })
      failed_with(st, ('header "%s" is not allowed with http_allow'):format(name))
    end
    -- read as a C string, "Host\0x" was "Host" to curl, and passed the check
    local st = call({ url = server.base .. "/a", nul_name = { "Host", "x", "admin.internal" } })
    failed_with(st, 'header "Host" has a NUL byte')
    st = call({ url = server.base .. "/a", nul_value = { "X-A", "ok", "\r\nHost: admin.internal" } })
    failed_with(st, 'header "X-A" has a NUL byte')
    assert.are.equal(0, #seen())
  end)

  it("refuses a max_bytes over the memory limit: the answer is held outside it until whole", function()
    script({ ["/a"] = { { status = 200 } } })
    local st = call({ url = server.base .. "/a", max_bytes = 1 << 40 })
    failed_with(st, "max_bytes of 1099511627776 is over the memory limit (33554432 bytes)")
    assert.are.equal(0, #seen())
    st = call({ url = server.base .. "/a", max_bytes = 1 << 20 })
    assert.are.equal("succeeded", st.status)
  end)

  it("holds no answer larger than a memory limit under 16 MiB: the default max_bytes is the limit", function()
    -- the default (16 MiB) was held whatever the limit: with 8 MiB a call that gave none took a
    -- 12 MB answer whole outside the limit, and only then failed it
    script({ ["/big"] = { { status = 200, size = 12000000 } } })
    local eng = H.new_engine({ sandbox = true, memory_limit = 8 << 20, http_allow = { "127.0.0.1" } })
    eng:load(H.write_file(H.tmp_dir(), "caller.lua", CALLER))
    local id = eng:start("caller", { url = server.base .. "/big" })
    eng:run()
    failed_with(eng:status(id), "response larger than max_bytes (8388608 bytes)")
  end)

  it("refuses a header name that is not a token, which curl reads its own way", function()
    -- curl took "Host;" for its Host with an empty value, dropped its own and sent
    -- "Host:: admin.internal"; "Host " and "Host\t" went as a second Host line
    script({ ["/a"] = { { status = 200 } } })
    for _, name in ipairs { "Host;", "Host ", "Host\t", "X:A", "", "caf\u{e9}" } do
      local st = call({ url = server.base .. "/a", headers = { [name] = "admin.internal" } })
      failed_with(st, ('header "%s" is not a header name'):format(name))
    end
    assert.are.equal(0, #seen())
  end)

  -- What held before: each is refused at the call, nothing sent.
  it("matches the host curl connects to, whatever the URL's text makes of it", function()
    script({ ["/a"] = { { status = 200 } } })
    local port = server.port
    for _, c in ipairs {
      { "http://127.0.0.1@evil.invalid:" .. port .. "/a", "evil.invalid" },             -- userinfo
      { "http://127.0.0.1:x@evil.invalid:" .. port .. "/a", "evil.invalid" },
      { "http://evil.invalid:" .. port .. "#@127.0.0.1/a", "evil.invalid" },
      { "http://127.0.0.1.evil.invalid:" .. port .. "/a", "127.0.0.1.evil.invalid" },
      { "http://[::1]:" .. port .. "/a", "[::1]" },                                     -- IPv6
      { "http://localhost:" .. port .. "/a", "localhost" },                             -- loopback by name
    } do
      local st = call({ url = c[1] })
      failed_with(st, ('host "%s" is not allowed'):format(c[2]))
    end
    for _, c in ipairs {
      { "http://example.com.evil.invalid/", "*.example.com" },
      { "http://evilexample.com/", "*.example.com" },
      { "http://example.com./", "example.com" },                                      -- trailing dot
      { "http://a.example.com./", "*.example.com" },
    } do
      failed_with(call({ url = c[1] }, { c[2] }), "is not allowed")
    end
    for _, url in ipairs { "file:///etc/passwd", "gopher://127.0.0.1/", "HTTP://127.0.0.1:" .. port .. "/a" } do
      local st = call({ url = url })
      if url:match("^HTTP") then assert.are.equal("succeeded", st.status)   -- a scheme's case is no way out
      else failed_with(st, "is not http or https") end
    end
    assert.are.equal(1, #seen())
  end)

  -- The docs name an IPv6 address in the list as "::1"; the URL's host is "[::1]", and an
  -- entry without brackets allowed the address's connection but refused its URL. Port 1 of ::1
  -- has no server: a request that is sent fails to connect (retryable), one refused at the
  -- call is fatal.
  it("allows an IPv6 address's URL by its entry with or without brackets", function()
    for _, entry in ipairs { "::1", "[::1]", "[::1" } do
      local st = call({ url = "http://[::1]:1/a" }, { entry })
      local e = tostring(st.steps[1].error)
      if entry == "[::1" then
        failed_with(st, 'host "[::1]" is not allowed')
      else
        assert.is_falsy(e:find("is not allowed", 1, true), entry .. ": " .. e)
        assert.is_truthy(e:find("onnect", 1, true), entry .. ": " .. e)
      end
    end
  end)

  it("follows no redirect, to an allowed host or not", function()
    script({ ["/r"] = { { status = 302, headers = { Location = "http://evil.invalid/" } } },
             ["/s"] = { { status = 302, headers = { Location = "file:///etc/passwd" } } } })
    for _, path in ipairs { "/r", "/s" } do
      local st = call({ url = server.base .. path })
      assert.are.equal("succeeded", st.status)
      assert.are.equal(302, st.steps[1].result.status)
    end
    assert.are.equal(2, #seen())
  end)
end)
