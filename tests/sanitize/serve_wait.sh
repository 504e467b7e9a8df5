#!/bin/sh
# `mend serve`'s long polls (GET /api/v1/runs/{id}?wait=S) under LeakSanitizer: a waiter whose
# client goes away before the run ends, one that times out, one answered when its run ends,
# and one still waiting when the server stops. Each waiter lives in its request's memory, which
# h2o frees only once the request is ended: one let go without an answer, or still on the list
# at the stop, would be reported. run.sh runs it in the sanitized build; leaks are on for this
# process alone, whose engine and Lua state are freed before it exits.
#
#   sh tests/sanitize/serve_wait.sh MEND SOURCE_DIR
#
# Exits 0, or 1 printing what went wrong.
set -u
mend=$1
src=$2
name=serve_wait
. "$src/tests/sanitize/serve_lib.sh"
serve_workspace
cat >"$dir/wf/wait.lua" <<'LUA'
return { name = "wait", steps = {
  { name = "paid", wait_for = "payment", timeout = 3600 },
  { name = "ship", execute = function() return "shipped" end },
} }
LUA
serve_start worker --poll 0.05
python3 - "$port" >"$dir/client" 2>&1 <<'PY' &
import json, socket, sys, time, urllib.request
port = int(sys.argv[1])
base = "http://127.0.0.1:%d/api/v1" % port
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
def waiter(run, seconds):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET /api/v1/runs/%s?wait=%s HTTP/1.1\r\nHost: localhost\r\n\r\n"
               % (run, seconds)).encode())
    return s
a, b, c = (post("/runs", {"workflow": "wait"})["id"] for _ in range(3))
gone = waiter(a, 30)
time.sleep(0.3)
gone.close()                      # goes away before its run ends
timeout = waiter(a, 0.5)          # times out
ends = waiter(b, 30)              # answered when its run ends
held = waiter(c, 30)              # still waiting when the server stops
time.sleep(1.5)                   # the server lets the first go (its look at sockets: 1 s)
post("/runs/%s/events" % b, {"name": "payment"})
for s, want in ((timeout, b'"wait":"timeout"'), (ends, b'"wait":"ended"')):
    s.settimeout(10)
    data = b""
    while want not in data:
        got = s.recv(65536)
        if not got:
            break
        data += got
    assert want in data, data
print("waiting", flush=True)
time.sleep(60)
PY
client=$!
for _ in $(seq 1 200); do
  grep -q waiting "$dir/client" && break
  sleep 0.1
done
if ! grep -q waiting "$dir/client"; then
  echo "serve_wait: the client failed:"
  cat "$dir/client" "$dir/err"
  kill "$server" "$client"
  exit 1
fi
serve_stop "$client"
