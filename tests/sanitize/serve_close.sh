#!/bin/sh
# `mend serve` stopping while clients hold connections h2o has not seen a whole request on (one
# idle from its connect, one halfway through its request line, one halfway through a body),
# under LeakSanitizer: h2o must close each itself and free its memory (824 bytes a
# connection, 4 KB more with half a body were left when the server closed the sockets under
# it). run.sh runs it in the sanitized build; leaks are on for this process alone, whose
# engine and Lua state are freed before it exits.
#
#   sh tests/sanitize/serve_close.sh MEND SOURCE_DIR
#
# Exits 0, or 1 printing what went wrong.
set -u
mend=$1
src=$2
name=serve_close
. "$src/tests/sanitize/serve_lib.sh"
serve_workspace
serve_start serve
# The client holds its three connections until it is killed, after the server stopped.
python3 - "$port" >"$dir/client" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
held[1].sendall(b"GET /api/v1/ru")
held[2].sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: localhost\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b"x" * 500)
print("held", flush=True)
time.sleep(60)
PY
client=$!
for _ in $(seq 1 100); do
  grep -q held "$dir/client" && break
  sleep 0.1
done
sleep 0.5   # the server reads what was sent
serve_stop "$client"
