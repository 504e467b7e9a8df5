-- http_addr.c asks the kernel whether an address is this machine's with an
-- RTM_GETROUTE that carries the destination alone; the connect's own lookup carries the
-- protocol (TCP) and the ports too. A policy rule that selects on them answers the two apart:
-- here (a network namespace of the test's own, unshare -rn) the local table's rule is moved
-- after one that makes every non-TCP lookup unreachable, as `ip route get` is. The query hears
-- "unreachable" (taken for "not local"), the TCP connect reaches the host's listener on
-- 0.0.0.0 at the AnyIP address 198.51.100.7.
local H = require "spec.helper"

local CALLER = [==[
local mend = require "mend"
return { name = "caller", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function(ctx)
  local res = mend.http(ctx.input)
  return { status = res.status }
end } } }
]==]

-- "198-51-100-7.own.test" resolves to 198.51.100.7 with no DNS of the test's own
local SHIM = [[
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
typedef int (*gai)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
int getaddrinfo(const char *n, const char *s, const struct addrinfo *h, struct addrinfo **r) {
  gai real = (gai)dlsym(RTLD_NEXT, "getaddrinfo");
  char buf[64];
  const char *end = n ? strstr(n, ".own.test") : NULL;
  if (end && (size_t)(end - n) < sizeof buf) {
    size_t k = 0;
    for (; n + k < end; k++) buf[k] = n[k] == '-' ? '.' : n[k];
    buf[k] = 0;
    n = buf;
  }
  return real(n, s, h, r);
}
]]

describe("the route query against the connect's own lookup", function()
  after_each(H.cleanup)

  it("refuses an address the connect reaches locally through a rule on the protocol", function()
    local setup = "ip link set lo up && ip route add local 198.51.100.0/24 dev lo && "
                  .. "ip rule add pref 100 lookup local && ip rule del pref 0 && "
                  .. "ip rule add pref 10 not ipproto tcp unreachable"
    local rc0, why = H.shell("unshare -rn sh -c " .. H.quote(setup) .. " 2>&1")
    if rc0 ~= 0 then pending("no network namespace with policy rules here: " .. why) return end
    local dir = H.tmp_dir()
    local so = dir .. "/shim.so"
    if H.shell(("cc -shared -fPIC -o %s %s -ldl")
                 :format(so, H.write_file(dir, "shim.c", SHIM))) ~= 0 then
      pending("no C compiler")
      return
    end
    local listener = H.write_file(dir, "any.py", [[
import os, socket, sys, threading
s = socket.socket(socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 0))
s.listen(64)
open(sys.argv[2] + ".tmp", "w").write("%d" % s.getsockname()[1])
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
def serve(c):
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    c.close()
while True:
    c, _ = s.accept()
    open(sys.argv[1], "a").write("accepted\n")
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]])
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
    local log, portfile = dir .. "/accepted", dir .. "/port"
    H.write_file(dir, "accepted", "")
    local script = H.write_file(dir, "ns.sh", ([[
%s || exit 90
python3 %s %s %s >/dev/null 2>&1 &
L=$!
i=0
while [ ! -f %s ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
env -u http_proxy -u https_proxy -u all_proxy -u ALL_PROXY -u HTTPS_PROXY -u HTTP_PROXY \
  -u no_proxy -u NO_PROXY LD_PRELOAD=%s lua %s "$(cat %s)"
rc=$?
kill $L
exit $rc
]]):format(setup, listener, log, portfile, portfile, so, calls, portfile))
    local rc, out = H.shell("unshare -rn sh " .. script .. " 2>&1")
    assert.are.equal(0, rc, out)
    local accepted = 0
    for _ in io.lines(log) do accepted = accepted + 1 end
    assert.are.equal(0, accepted, "the host's listener was reached: " .. out)
    assert.is_truthy(out:find('host "198-51-100-7.own.test" is at address 198.51.100.7', 1, true),
                     out)
  end)
end)
