-- GET /api/v1/runs/{id}?wait=S under a crowd: more waiters than the server holds (192 of its
-- 256 connections) are answered "busy" at once, and the request that ends their run (an
-- event) still gets in: the held waiters are each answered "ended" once.
local H = require "spec.helper"

local q, sh = H.quote, H.shell
local S = require "spec.support.serve_harness"
local workspace, start, post = S.workspace, S.start, S.post

local function py(dir, name, text, args)
  local script = H.write_file(dir, name, text)
  local _, out = sh("python3 " .. q(script) .. " " .. args .. " 2>&1")
  return out
end

local CROWD = [[
import json, socket, sys, time
port, run, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET /api/v1/runs/%s?wait=20 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % run).encode())
    conns.append(s)
time.sleep(1.5)
body = json.dumps({"name": "payment"}).encode()
s = socket.create_connection(("127.0.0.1", port))
try:
    s.sendall(b"POST /api/v1/runs/" + run.encode() + b"/events HTTP/1.1\r\nHost: localhost\r\n"
              b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.settimeout(10)
    print("event", s.recv(65536).split(b"\r\n", 1)[0].decode() or "closed")
except Exception as e:
    print("event", type(e).__name__)
ended = busy = 0
for c in conns:
    c.settimeout(15)
    data = b""
    try:
        while True:
            got = c.recv(65536)
            if not got:
                break
            data += got
    except Exception:
        pass
    ended += b'"wait":"ended"' in data
    busy += b'"wait":"busy"' in data
print("ended", ended, "busy", busy)
]]

describe("GET /api/v1/runs/{id}?wait=S under a crowd", function()
  after_each(S.cleanup)

  it("holds 192 of 500 waiters, answers the rest busy, and takes the event that ends the run", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --poll 0.05", "worker")
    local _, r = post(base, "/api/v1/runs", { workflow = "wait" })
    local out = py(dir, "crowd.py", CROWD, base:match(":(%d+)$") .. " " .. r.id .. " 500")
    assert.matches("event HTTP/1.1 202", out)
    local ended, busy = out:match("ended (%d+) busy (%d+)")
    assert.are.equal("192", ended, out)   -- the rest: busy, or closed unanswered past 256 connections
    assert.is_true(tonumber(busy) > 0, out)
  end)
end)
