-- mend.http under an allow-list, to a name the allow-list allows that leads to an address of the
-- engine's own machine or link (loopback, this machine's interface addresses, unspecified,
-- link-local, IPv4-mapped forms of these):
-- refused at the address curl connects to, a fatal error naming the host and the address,
-- unless the allow-list names that address or localhost. curl resolves "localhost" and any name
-- under it to loopback without DNS, so these specs need no DNS of their own. An environment
-- proxy gets no allowance: its address is checked as any other, so one on loopback must be named
-- by its address, and the target's name is what the allow-list checks (src/engine/http_addr.c).
local mend = require "mend"
local H = require "spec.helper"

-- tests/http_server.py, started once for the file; script(tbl) rewrites what it answers
local server = require("spec.support.http_server").new()
local script, seen = server.script, server.seen

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

-- Runs one sandboxed call to url with http_allow = allow in a process of its own under `env`
-- (a shell prefix: proxy variables are read from the process's environment); returns
-- "status error".
local function call_in(env, url, allow)
  local dir = H.tmp_dir()
  local wf = H.write_file(dir, "caller.lua", CALLER)
  local code = ([[
    local mend = require "mend"
    local eng = mend.engine { db = %q, sandbox = true, memory_limit = 32 << 20, http_allow = %s }
    eng:load(%q)
    local id = eng:start("caller", { url = %q })
    eng:run()
    local st = eng:status(id)
    io.write(st.status, " ", tostring(st.steps[1].error))
    eng:close()
  ]]):format(dir .. "/p.db", mend.json.encode(allow):gsub("^%[", "{"):gsub("%]$", "}"), wf, url)
  H.write_file(dir, "call.lua", code)
  local _, out = H.shell(env .. " lua " .. dir .. "/call.lua 2>&1")
  return out
end

-- A shim of getaddrinfo and socket (LD_PRELOAD), so that no DNS of the test's own is needed
-- and the kernel's route query can fail: "api.own.test" is OWN_ADDR, "198-51-100-7.own.test"
-- is 198.51.100.7; ROUTE_FAIL refuses every netlink socket (no descriptor left), and
-- ROUTE_FAIL_FIRST=N the first N.
local OWN_SHIM = [[
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
typedef int (*gai)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
typedef int (*sk)(int, int, int);
static int opened;
int getaddrinfo(const char *n, const char *s, const struct addrinfo *h, struct addrinfo **r) {
  gai real = (gai)dlsym(RTLD_NEXT, "getaddrinfo");
  char buf[64];
  const char *end = n ? strstr(n, ".own.test") : NULL;
  if (end && end - n == 3 && strncmp(n, "api", 3) == 0) {
    n = getenv("OWN_ADDR");
  } else if (end && (size_t)(end - n) < sizeof buf) {
    size_t k = 0;
    for (; n + k < end; k++) buf[k] = n[k] == '-' ? '.' : n[k];
    buf[k] = 0;
    n = buf;
  }
  return real(n, s, h, r);
}
int socket(int d, int t, int p) {
  sk real = (sk)dlsym(RTLD_NEXT, "socket");
  if (d == AF_NETLINK) {
    const char *first = getenv("ROUTE_FAIL_FIRST");
    opened++;
    if (getenv("ROUTE_FAIL") || (first && opened <= atoi(first))) { errno = EMFILE; return -1; }
  }
  return real(d, t, p);
}
]]

local function refused(st, host, address)
  assert.are.equal("failed", st.status)
  local e = st.steps[1].error
  assert.is_truthy(e:find(('host "%s" is at address %s'):format(host, address), 1, true), e)
end

describe("mend.http's connections under http_allow", function()
  setup(server.start)
  teardown(server.stop)
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

  it("checks an environment proxy's address as any other, and the target's name", function()
    -- The proxy (the test server on 127.0.0.1) gets the whole URL as its request's target; the
    -- target's name is only the proxy's to resolve. A proxy on loopback is named by address.
    local target = "http://api.example.test/a"
    script({ [target] = { { status = 200 } } })
    local env = "env -u no_proxy -u NO_PROXY http_proxy=http://127.0.0.1:" .. server.port
    local out = call_in(env, target, { "*.example.test" })
    assert.is_truthy(out:find('host "api.example.test" is at address 127.0.0.1', 1, true), out)
    assert.are.equal(0, #seen())
    out = call_in(env, target, { "*.example.test", "127.0.0.1" })
    assert.are.equal("succeeded nil", out)
    assert.are.equal(1, #seen())
    -- a name outside the allow-list is refused before any connection, proxy or not
    out = call_in(env, target, { "other.test", "127.0.0.1" })
    assert.is_truthy(out:find('host "api.example.test" is not allowed', 1, true), out)
    assert.are.equal(1, #seen())
  end)

  -- curl ignores upper-case HTTP_PROXY (httpoxy: a CGI host gets it from a request's Proxy
  -- header) and goes straight to the target: nothing of HTTP_PROXY's is allowed.
  it("allows no loopback port because of an HTTP_PROXY curl never uses", function()
    script({ ["/a"] = { { status = 200 } } })
    local env = "env -u http_proxy -u https_proxy -u all_proxy -u ALL_PROXY -u HTTPS_PROXY "
                .. "-u no_proxy -u NO_PROXY HTTP_PROXY=http://127.0.0.1:9"
    local out = call_in(env, "http://api.localhost:" .. server.port .. "/a", { "*.localhost" })
    assert.are.equal(0, #seen(), "the loopback server was reached: " .. out)
    assert.is_truthy(out:find('host "api.localhost" is at address', 1, true), out)
  end)

  -- A proxy on loopback allowed no port of loopback for the requests that do not go through it:
  -- a target no_proxy exempts, an https URL when only http_proxy is set.
  it("allows no loopback port because a proxy is on loopback, for a direct request", function()
    script({ ["/a"] = { { status = 200 } } })
    local env = "env -u https_proxy -u HTTPS_PROXY -u all_proxy -u ALL_PROXY -u HTTP_PROXY "
                .. "http_proxy=http://127.0.0.1:9 no_proxy=localhost"
    local out = call_in(env, "http://api.localhost:" .. server.port .. "/a", { "*.localhost" })
    assert.are.equal(0, #seen(), "the loopback server was reached: " .. out)
    assert.is_truthy(out:find('host "api.localhost" is at address', 1, true), out)
    env = "env -u https_proxy -u HTTPS_PROXY -u all_proxy -u ALL_PROXY -u HTTP_PROXY "
          .. "-u no_proxy -u NO_PROXY http_proxy=http://127.0.0.1:9"
    out = call_in(env, "https://api.localhost:" .. server.port .. "/a", { "*.localhost" })
    assert.is_truthy(out:find('host "api.localhost" is at address', 1, true), out)
  end)
end)

describe("mend.http's connections under http_allow, the proxy's name", function()
  after_each(H.cleanup)

  -- Nothing of mend's resolves a proxy's name: a DNS that does not answer (a getaddrinfo that
  -- waits 3 s for "slowproxy") would hold the loop at the first request, per proxy variable.
  it("holds no loop resolving a proxy's name", function()
    local dir = H.tmp_dir()
    local shim = H.write_file(dir, "slowdns.c", [[
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <unistd.h>
typedef int (*gai)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
int getaddrinfo(const char *n, const char *s, const struct addrinfo *h, struct addrinfo **r) {
  static gai real;
  if (!real) real = (gai)dlsym(RTLD_NEXT, "getaddrinfo");
  if (n && strstr(n, "slowproxy")) { sleep(3); return EAI_AGAIN; }
  return real(n, s, h, r);
}
]])
    local so = dir .. "/slowdns.so"
    local rc = H.shell(("cc -shared -fPIC -o %s %s -ldl"):format(so, shim))
    if rc ~= 0 then pending("no C compiler") return end
    local proxy = "http://slowproxy.corp:3128"
    local env = ("env LD_PRELOAD=%s no_proxy='*' http_proxy=%s HTTP_PROXY=%s https_proxy=%s")
                :format(so, proxy, proxy, proxy)
    local t0 = os.time()
    local out = call_in(env, "http://api.localhost:9/a", { "*.localhost" })
    local took = os.time() - t0
    assert.is_truthy(out:find('host "api.localhost" is at address', 1, true), out)
    assert.is_true(took < 3, ("the engine was held %d s resolving the proxy's name"):format(took))
  end)
end)

describe("mend.http's connections under http_allow, a name's next address", function()
  after_each(H.cleanup)

  -- api.localhost is 127.0.0.1 and ::1; the list names ::1 only. 127.0.0.1 is refused, ::1 is
  -- reached, the request sent, and its answer times out: the request's error is that timeout
  -- (retryable), not a refusal of the address it went past.
  it("reports the error of the address it reached, not a refusal of one it went past", function()
    local dir = H.tmp_dir()
    local py = H.write_file(dir, "silent6.py", [[
import os, socket, sys
s = socket.socket(socket.AF_INET6)
s.bind(("::1", 0))
s.listen(8)
open(sys.argv[2] + ".tmp", "w").write("%d %d" % (s.getsockname()[1], os.getpid()))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
held = []
while True:
    c, _ = s.accept()
    held.append(c)
    open(sys.argv[1], "a").write("accepted\n")
]])
    local log, portfile = dir .. "/accepted", dir .. "/port"
    H.write_file(dir, "accepted", "")
    os.execute("python3 " .. py .. " " .. log .. " " .. portfile .. " >/dev/null 2>&1 &")
    local f
    for _ = 1, 100 do
      f = io.open(portfile)
      if f then break end
      os.execute("sleep 0.05")
    end
    if not f then pending("no ::1 here") return end
    local port, pid = f:read("a"):match("^(%d+) (%d+)$")
    f:close()
    local eng = H.new_engine({ sandbox = true, memory_limit = 32 << 20,
                               http_allow = { "*.localhost", "::1" } })
    eng:load(H.write_file(dir, "caller.lua", CALLER))
    local id = eng:start("caller", { url = "http://api.localhost:" .. port .. "/slow",
                                     timeout = 0.5 })
    eng:run()
    local st = eng:status(id)
    os.execute("kill " .. pid)
    local accepted = io.open(log):read("a")
    local e = tostring(st.steps[1].error)
    assert.is_truthy(accepted:find("accepted", 1, true), "::1 was not reached: " .. e)
    assert.is_falsy(e:find("is at address", 1, true),
                    "a sent request's timeout reported as a refusal: " .. e)
    assert.is_truthy(e:find("imed out", 1, true), e)
  end)
end)

-- A listener of the host's kind on `bind` ("::", dual-stack, or "0.0.0.0"), as Python's text: it
-- answers each connection 200 and logs it (argv[1], a line a connection), and writes "port pid"
-- to argv[2] once it listens.
local function listener(bind)
  local v6 = bind:find(":", 1, true) ~= nil
  return ([[
import os, socket, sys, threading
s = socket.socket(socket.%s)
%ss.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((%q, 0))
s.listen(64)
open(sys.argv[2] + ".tmp", "w").write("%%d %%d" %% (s.getsockname()[1], os.getpid()))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
def serve(c):
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    c.close()
while True:
    c, _ = s.accept()
    open(sys.argv[1], "a").write("accepted\n")
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]):format(v6 and "AF_INET6" or "AF_INET",
           v6 and "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n" or "", bind)
end

-- This machine's own interface addresses (eth0's 10.x or fd00::2, not loopback): a listener of
-- the host's bound to :: or 0.0.0.0 answers on them as on loopback. An allowed name that
-- resolves to one (a getaddrinfo shim here: no DNS of the test's own), or a proxy there, is
-- refused as loopback is, unless the list names that address or localhost. The kernel is asked
-- at each connection (a netlink route query): one that fails refuses the connection, retryable.
describe("mend.http's connections under http_allow, this machine's own addresses", function()
  after_each(H.cleanup)

  -- The machine's addresses but loopback and IPv6 link-local (hostname -I), or nil.
  local function own_addresses()
    local p = io.popen("hostname -I 2>/dev/null")
    local text = p and p:read("a") or ""
    if p then p:close() end
    local out = {}
    for a in text:gmatch("%S+") do
      if not a:find("^fe80") then out[#out + 1] = a end
    end
    return #out > 0 and out or nil
  end

  it("refuses an allowed name or a proxy at one of them, unless the list names it", function()
    local addrs = own_addresses()
    if not addrs then pending("this machine has no address but loopback") return end
    local dir = H.tmp_dir()
    -- a dual-stack listener on ::, as a host's own service may be; each connection logged
    local py = H.write_file(dir, "own.py", listener("::"))
    local shim = H.write_file(dir, "ownaddr.c", OWN_SHIM)
    local so = dir .. "/ownaddr.so"
    if H.shell(("cc -shared -fPIC -o %s %s -ldl"):format(so, shim)) ~= 0 then
      pending("no C compiler")
      return
    end
    local log, portfile = dir .. "/accepted", dir .. "/port"
    H.write_file(dir, "accepted", "")
    os.execute("python3 " .. py .. " " .. log .. " " .. portfile .. " >/dev/null 2>&1 &")
    local f
    for _ = 1, 100 do
      f = io.open(portfile)
      if f then break end
      os.execute("sleep 0.05")
    end
    assert(f, "the listener did not start")
    local port, pid = f:read("a"):match("^(%d+) (%d+)$")
    f:close()
    local function accepted()
      local n = 0
      for _ in io.lines(log) do n = n + 1 end
      return n
    end
    local ok, err = pcall(function()
      local quiet = "env -u http_proxy -u https_proxy -u all_proxy -u ALL_PROXY -u HTTPS_PROXY "
                    .. "-u HTTP_PROXY -u no_proxy -u NO_PROXY "
      for _, a in ipairs(addrs) do
        local hostport = (a:find(":") and "[" .. a .. "]" or a) .. ":" .. port
        local env = quiet .. ("LD_PRELOAD=%s OWN_ADDR=%s"):format(so, a)
        local url = "http://api.own.test:" .. port .. "/a"
        local before = accepted()
        local out = call_in(env, url, { "*.own.test" })
        assert.is_truthy(out:find(('host "api.own.test" is at address %s'):format(a), 1, true),
                         a .. ": " .. out)
        assert.are.equal(before, accepted(), a .. " was reached: " .. out)
        assert.are.equal("succeeded nil", call_in(env, url, { "*.own.test", a }), a)
        assert.are.equal("succeeded nil", call_in(env, url, { "*.own.test", "localhost" }), a)
        assert.are.equal(before + 2, accepted())
        -- a proxy at the address: the check sees the proxy's address, whatever the target
        before = accepted()
        out = call_in(quiet .. "http_proxy=http://" .. hostport, "http://api.example.test/a",
                      { "*.example.test" })
        assert.is_truthy(out:find(('host "api.example.test" is at address %s'):format(a), 1,
                                  true), a .. ": " .. out)
        assert.are.equal(before, accepted(), a .. " was reached through the proxy: " .. out)
      end
      -- the kernel not asked (no netlink socket: no descriptor left): not connected,
      -- retryable, but where the list names localhost
      local env = quiet .. ("LD_PRELOAD=%s OWN_ADDR=%s ROUTE_FAIL=1"):format(so, addrs[1])
      local url = "http://api.own.test:" .. port .. "/a"
      local before = accepted()
      local out = call_in(env, url, { "*.own.test" })
      assert.is_truthy(out:find("could not be asked whether it is one of this machine's own "
                                .. "addresses (netlink route query: Too many open files)", 1, true), out)
      assert.is_truthy(out:find("retryable", 1, true), out)
      assert.are.equal(before, accepted(), out)
      assert.are.equal("succeeded nil", call_in(env, url, { "*.own.test", "localhost" }))
      -- a failed query names its own errno, not that of a query made after it (which
      -- succeeded) before the refused request's answer was written: the first connection's
      -- socket is refused, the next connections' queries are answered
      env = quiet .. ("LD_PRELOAD=%s OWN_ADDR=%s ROUTE_FAIL_FIRST=1"):format(so, addrs[1])
      local ten = ([[
        local mend = require "mend"
        local eng = mend.engine { db = %q, sandbox = true, http_allow = { "*.own.test" } }
        eng:load(%q)
        local ids = {}
        for i = 1, 10 do ids[i] = eng:start("caller", { url = %q }) end
        eng:run()
        for _, id in ipairs(ids) do io.write(tostring(eng:status(id).steps[1].error), "\n") end
        eng:close()
      ]]):format(dir .. "/t.db", H.write_file(dir, "caller10.lua", CALLER), url)
      H.write_file(dir, "ten.lua", ten)
      local _, told = H.shell(env .. " lua " .. dir .. "/ten.lua 2>&1")
      assert.is_truthy(told:find("(netlink route query: Too many open files)", 1, true), told)
      assert.is_falsy(told:find("route query: Success", 1, true), told)
    end)
    os.execute("kill " .. pid)
    assert(ok, err)
  end)
end)

-- Runs `calls` (a Lua file; its argument is the listener's port) with the getaddrinfo shim in a
-- network namespace of the test's own (unshare -rn) made by the shell commands `setup`, beside a
-- listener on 0.0.0.0 there that logs each connection: the exit code, the output and the
-- connections the listener accepted. nil and why when this machine or test cannot.
local function in_netns(dir, setup, calls)
  local rc0, why = H.shell("unshare -rn sh -c " .. H.quote(setup) .. " 2>&1")
  if rc0 ~= 0 then return nil, "no network namespace of the test's own here (unshare -rn, "
                               .. setup .. "): " .. why end
  local so = dir .. "/ownaddr.so"
  if H.shell(("cc -shared -fPIC -o %s %s -ldl")
               :format(so, H.write_file(dir, "ownaddr.c", OWN_SHIM))) ~= 0 then
    return nil, "no C compiler"
  end
  local any = H.write_file(dir, "any.py", listener("0.0.0.0"))
  local log, portfile = dir .. "/accepted", dir .. "/port"
  H.write_file(dir, "accepted", "")
  local script = H.write_file(dir, "ns.sh", ([[
%s || exit 90
python3 %s %s %s >/dev/null 2>&1 &
L=$!
i=0
while [ ! -f %s ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
set -- $(cat %s)
env -u http_proxy -u https_proxy -u all_proxy -u ALL_PROXY -u HTTPS_PROXY -u HTTP_PROXY \
  -u no_proxy -u NO_PROXY LD_PRELOAD=%s lua %s "$1"
rc=$?
kill $L
exit $rc
]]):format(setup, any, log, portfile, portfile, portfile, so, calls))
  local rc, out = H.shell("unshare -rn sh " .. script .. " 2>&1")
  local accepted = 0
  for _ in io.lines(log) do accepted = accepted + 1 end
  return rc, out, accepted
end

-- An address this machine delivers to itself by a local route only (AnyIP: `ip route add local
-- 198.51.100.0/24 dev lo`) is on no interface, and one an interface takes after the engine's
-- first request is new: both are the kernel's answer at the connection, refused at once. In a
-- network namespace of the test's own (unshare -rn), with a listener on 0.0.0.0 there.
describe("mend.http's connections under http_allow, the kernel's local addresses", function()
  after_each(H.cleanup)

  it("refuses an AnyIP address, and an address taken after the first request", function()
    local dir = H.tmp_dir()
    local calls = H.write_file(dir, "ns.lua", ([[
      local mend = require "mend"
      local port, n = arg[1], 0
      local function engine(allow)
        n = n + 1
        local eng = mend.engine { db = %q .. n .. ".db", sandbox = true, http_allow = allow }
        eng:load(%q)
        return eng
      end
      local function call(eng, host)
        local id = eng:start("caller", { url = "http://" .. host .. ".own.test:" .. port .. "/a" })
        eng:run()
        local st = eng:status(id)
        return st.status .. " " .. tostring(st.steps[1].error)
      end
      local eng = engine { "*.own.test" }
      io.write("anyip=", call(eng, "198-51-100-7"), "\n")
      io.write("before=", call(eng, "203-0-113-9"), "\n")
      assert(os.execute("ip addr add 203.0.113.9/32 dev lo"))
      io.write("after=", call(eng, "203-0-113-9"), "\n")
      eng:close()
      for _, allow in ipairs { "localhost", "198.51.100.7" } do
        eng = engine { "*.own.test", allow }
        io.write(allow, "=", call(eng, "198-51-100-7"), "\n")
        eng:close()
      end
    ]]):format(dir .. "/ns", H.write_file(dir, "caller.lua", CALLER)))
    local rc, out, accepted = in_netns(dir, "ip link set lo up && ip route add local "
                                       .. "198.51.100.0/24 dev lo", calls)
    if not rc then pending(out) return end
    assert.are.equal(0, rc, out)
    local said = {}
    for k, v in out:gmatch("([%w.]+)=([^\n]*)") do said[k] = v end
    assert.is_truthy((said.anyip or ""):find('host "198-51-100-7.own.test" is at address '
                                             .. "198.51.100.7, of the engine's own", 1, true), out)
    -- no route to it yet: the connection fails as any, no address is refused
    assert.is_falsy((said.before or ""):find("is at address", 1, true), out)
    assert.is_truthy((said.after or ""):find('host "203-0-113-9.own.test" is at address '
                                             .. "203.0.113.9, of the engine's own", 1, true), out)
    assert.are.equal("succeeded nil", said.localhost, out)
    assert.are.equal("succeeded nil", said["198.51.100.7"], out)
    assert.are.equal(2, accepted, "connections made: " .. out)
  end)

  -- The query asks what the connect's own lookup asks (TCP and the port): a policy rule that
  -- selects on the protocol answers the two apart otherwise. Here the local table's rule is
  -- moved after one that makes every lookup but TCP's unreachable: a query of the destination
  -- alone heard "unreachable" (taken for not local) while the TCP connect reached the listener.
  it("refuses an address the connect reaches locally through a rule on the protocol", function()
    local dir = H.tmp_dir()
    local calls = H.write_file(dir, "ns.lua", ([[
      local mend = require "mend"
      local eng = mend.engine { db = %q, sandbox = true, http_allow = { "*.own.test" } }
      eng:load(%q)
      local id = eng:start("caller", { url = "http://198-51-100-7.own.test:" .. arg[1] .. "/a" })
      eng:run()
      local st = eng:status(id)
      io.write("said=", st.status, " ", tostring(st.steps[1].error), "\n")
      eng:close()
    ]]):format(dir .. "/ns.db", H.write_file(dir, "caller.lua", CALLER)))
    local rc, out, accepted = in_netns(dir, "ip link set lo up && ip route add local "
      .. "198.51.100.0/24 dev lo && ip rule add pref 100 lookup local && ip rule del pref 0 && "
      .. "ip rule add pref 10 not ipproto tcp unreachable", calls)
    if not rc then pending(out) return end
    assert.are.equal(0, rc, out)
    assert.are.equal(0, accepted, "the host's listener was reached: " .. out)
    assert.is_truthy(out:find('host "198-51-100-7.own.test" is at address 198.51.100.7', 1, true),
                     out)
  end)
end)

-- Calls each of urls in turn from one step (one engine, its handles reused across schemes and
-- hosts), sandboxed with http_allow = allow, in a process of its own under `env`; returns what
-- each did, separated by " | ": the address a refusal names (the proxy curl went to), "direct"
-- (the target's name resolved: no proxy taken), or the error.
local function calls_in(env, urls, allow)
  local dir = H.tmp_dir()
  local wf = H.write_file(dir, "calls.lua", [==[
local mend = require "mend"
return { name = "calls", steps = { { name = "s", retry = { max_attempts = 1 },
                                     execute = function(ctx)
  local out = {}
  for _, u in ipairs(ctx.input.urls) do
    local ok, e = pcall(mend.http, { url = u, timeout = 5 })
    local m = ok and ("ok " .. tostring(e.status))
              or tostring(type(e) == "table" and e.message or e)
    out[#out + 1] = m:match("is at address (%S+),")
                    or (m:find("Could not resolve host") and "direct") or m
  end
  return { out = table.concat(out, " | ") }
end } } }
]==])
  local code = ([[
    local mend = require "mend"
    local eng = mend.engine { db = %q, sandbox = true, http_allow = %s }
    eng:load(%q)
    local id = eng:start("calls", { urls = mend.json.decode(%q) })
    eng:run()
    local st = eng:status(id).steps[1]
    io.write(st.result and st.result.out or tostring(st.error))
    eng:close()
  ]]):format(dir .. "/p.db", mend.json.encode(allow):gsub("^%[", "{"):gsub("%]$", "}"), wf,
             mend.json.encode(urls))
  H.write_file(dir, "calls_run.lua", code)
  local _, out = H.shell(env .. " lua " .. dir .. "/calls_run.lua 2>&1")
  return out
end

describe("mend.http's connections under http_allow, which environment proxy", function()
  after_each(H.cleanup)
  local CLEAR = "env -u http_proxy -u https_proxy -u all_proxy -u ALL_PROXY -u HTTPS_PROXY "
                .. "-u HTTP_PROXY -u no_proxy -u NO_PROXY "
  local allow = { "*.example.test", "*.localhost" }
  local A, S = "http://a.example.test/", "https://a.example.test/"

  -- Each proxy on a loopback address of its own that the list does not name: the refusal names
  -- the proxy curl chose, and no connection is made. The calls go http, https, http on one
  -- engine, so a handle moves between the schemes' proxies.
  it("takes each scheme's proxy as curl does, on a handle reused across schemes", function()
    local function via(vars) return calls_in(CLEAR .. vars, { A, S, A }, allow) end
    assert.are.equal("127.0.0.2 | 127.0.0.3 | 127.0.0.2",
                     via("http_proxy=http://127.0.0.2:9 https_proxy=http://127.0.0.3:9"))
    assert.are.equal("127.0.0.4 | 127.0.0.4 | 127.0.0.4", via("all_proxy=http://127.0.0.4:9"))
    -- an empty value is none: the upper-case form, then all_proxy, is taken
    assert.are.equal("127.0.0.4 | 127.0.0.3 | 127.0.0.4",
                     via("https_proxy= HTTPS_PROXY=http://127.0.0.3:9 "
                         .. "ALL_PROXY=http://127.0.0.4:9"))
    -- HTTP_PROXY never (httpoxy): an http URL falls to all_proxy
    assert.are.equal("127.0.0.4 | 127.0.0.4 | 127.0.0.4",
                     via("HTTP_PROXY=http://127.0.0.2:9 all_proxy=http://127.0.0.4:9"))
    -- no_proxy empty is none: NO_PROXY is read
    assert.are.equal("direct | 127.0.0.4 | 127.0.0.2",
                     calls_in(CLEAR .. "http_proxy=http://127.0.0.2:9 all_proxy=http://127.0.0.4:9 "
                              .. "no_proxy= NO_PROXY=a.example.test",
                              { A, "https://b.example.test/", "http://b.example.test/" }, allow))
  end)

  -- The environment is read once, at the engine's first request: a copy of a proxy's text that
  -- fails there (memory short for a moment) must fail that request, not leave every later one
  -- of the engine going straight to the target, past the proxy the host set (curl alone, reading
  -- at each request, lost the proxy for the one request only).
  it("sends no later request past a proxy whose text could not be copied once", function()
    local dir = H.tmp_dir()
    local shim = H.write_file(dir, "nodup.c", [[
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
char *strdup(const char *s) {
  static char *(*real)(const char *);
  static int failed;
  if (!real) real = (char *(*)(const char *))dlsym(RTLD_NEXT, "strdup");
  const char *f = getenv("FAIL_DUP");
  if (!failed && f && strcmp(s, f) == 0) { failed = 1; errno = ENOMEM; return NULL; }
  return real(s);
}
]])
    local so = dir .. "/nodup.so"
    if H.shell(("cc -shared -fPIC -o %s %s -ldl"):format(so, shim)) ~= 0 then
      pending("no C compiler")
      return
    end
    local env = CLEAR .. ("LD_PRELOAD=%s FAIL_DUP=http://127.0.0.2:9 "
                          .. "http_proxy=http://127.0.0.2:9"):format(so)
    local out = calls_in(env, { A, A, A }, allow)
    local later = out:match("^[^|]*| (.*)$")
    assert.are.equal("127.0.0.2 | 127.0.0.2", later, out)
  end)
end)
