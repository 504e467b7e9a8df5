-- Edges of what serve and `mend signal` are given: an empty run id, an empty segment in a path
-- with no id in it, a null optional field (from the review of the unknown_field change); and the
-- connections a stopping server has: idle ones closed at once, a request in progress answered.
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"
local json = mend.json

local MEND = H.MEND
local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."

local function run(...)
  local words = {}
  for i, a in ipairs({ ... }) do words[i] = H.quote(a) end
  local errfile = os.tmpname()
  local p = assert(io.popen(("cd %s && %s %s 2>%s"):format(H.quote(ROOT), H.quote(MEND),
                                                          table.concat(words, " "), H.quote(errfile))))
  local out = p:read("a")
  local _, _, code = p:close()
  local err = H.slurp(errfile)
  os.remove(errfile)
  return code, out, err
end

describe("serve and signal at their edges", function()
  after_each(S.cleanup)

  -- The fix names an empty run key (`--run-key "$ORDER"`, ORDER unset); the same mistake with
  -- the run's id (`mend signal "$ID" ev`, ID unset) still answers "no run " (naming nothing).
  it("says the run id is empty, as it says the run key is (CLI and eng:signal)", function()
    local _, db = S.workspace()
    local eng = mend.engine { db = db }   -- makes the database the CLI opens below
    local ok, e = pcall(eng.signal, eng, "", "boss_killed")
    eng:close()
    local code, _, err = run("signal", "", "boss_killed", "--db", db)
    assert.are.equal(2, code, err)   -- a usage error, as a missing RUN is
    assert.truthy(err:find("RUN is empty", 1, true), "mend signal '' says: " .. err)
    for _, cmd in ipairs { "status", "wait", "cancel", "history" } do
      local c, _, e2 = run(cmd, "", "--db", db)
      assert.are.equal(2, c, cmd .. ": " .. e2)
      assert.truthy(e2:find("RUN is empty", 1, true), cmd .. " '' says: " .. e2)
    end
    assert.is_false(ok)
    assert.truthy(tostring(e):find("empty", 1, true), "eng:signal('') says: " .. tostring(e))
  end)

  -- The 404 for an empty segment asks "an id left empty?" on paths with no id in them:
  -- a scraper's `/metrics/` (served before user23) and a client's base URL joined with a
  -- doubled slash (`/api/v1//runs`, `/api/v1/`) are told of an id that is not there.
  it("does not ask about an id left empty where the path has no id", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    for _, path in ipairs { "/metrics/", "/api/v1/", "/api/v1//runs" } do
      local c, e, raw = S.get(base, path)
      assert.are.equal(404, c, path .. ": " .. tostring(raw))
      assert.is_nil(e.error.message:find("id left empty", 1, true),
                    path .. ": " .. json.encode(e))
    end
  end)

  -- A null field is an absent one on every route (`"key": null` starts a run without a key);
  -- a typed client that sends its optional seconds as null to every breaker operation got 200
  -- for close and reset before user23, and now 400 unknown_field.
  it("takes a breaker close or reset whose seconds is null, as null is absent elsewhere",
     function()
    local dir, db = S.workspace()
    S.dead_letter(dir, db)
    local base = S.start(dir, db)
    local code, r = S.post(base, "/api/v1/runs", '{"workflow":"hello","input":{"to":"x"},"key":null}')
    assert.are.equal(201, code, json.encode(r))
    for _, op in ipairs { "open", "close", "reset" } do
      local c, b = S.post(base, "/api/v1/breakers/psp/" .. op, '{"seconds":null}')
      assert.are.equal(200, c, op .. ": " .. json.encode(b))
    end
  end)

  -- A stopping server closes a connection between requests at once: a client that keeps its
  -- connection (a browser) must not hold up the stop. One half-way through its request still
  -- gets its answer.
  -- An event's 1 MiB counts its data as eng:signal counts it, whose numbers are written in the
  -- fewest digits that give them back: serve wrote each fraction in 17 (0.1 as 19 bytes), and
  -- 800,001 bytes of 0.1's were refused as 4,000,001.
  it("counts an event's data as eng:signal does, 0.1 as 0.1", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local code, run = S.post(base, "/api/v1/runs", '{"workflow":"wait","input":{}}')
    assert.are.equal(201, code)
    local data = "[" .. ("0.1,"):rep(199999) .. "0.1]"
    assert.are.equal(800001, #data)
    local got, _, raw = S.post(base, "/api/v1/runs/" .. run.id .. "/events",
                               '{"name":"payment","data":' .. data .. '}')
    assert.are.equal(202, got, raw)
    local eng = H.new_engine()
    eng:register { name = "w", steps = { { name = "paid", wait_for = "payment" } } }
    local id = eng:start("w", {})
    local numbers = {}
    for i = 1, 200000 do numbers[i] = 0.1 end
    assert.are.equal("sent", (eng:signal(id, "payment", numbers)))
  end)

  -- The body around an event's data counts against --max-body too: at a default of 1 MiB an
  -- event of the documented largest data was refused 413.
  it("takes an event of the largest data (1 MiB) on its defaults, and refuses one byte more",
     function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local code, run = S.post(base, "/api/v1/runs", '{"workflow":"wait","input":{}}')
    assert.are.equal(201, code)
    local function send(n, key)
      local data = '"' .. ("x"):rep(n - 2) .. '"'
      assert.are.equal(n, #data)
      return S.post(base, "/api/v1/runs/" .. run.id .. "/events",
                    '{"name": "payment", "key": "' .. key .. '", "data": ' .. data .. '}')
    end
    local got, _, raw = send(1024 * 1024, ("k"):rep(1000))
    assert.are.equal(202, got, raw)
    got, _, raw = send(1024 * 1024 + 1, "k2")
    assert.are.equal(400, got, raw)
    assert.matches("over the limit of 1048576", raw)
  end)

  -- h2o frames a body by the first of two Content-Lengths (or by Transfer-Encoding beside
  -- one): a proxy in front that took the other reading passed bytes this server read as a
  -- request of their own (request smuggling). RFC 9112, 6.3: 400, and the connection closed.
  it("refuses two Content-Lengths that differ, or one with Transfer-Encoding, and closes",
     function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local code, run = S.post(base, "/api/v1/runs", '{"workflow":"wait","input":{}}')
    assert.are.equal(201, code)
    local rc, out = H.shell("python3 -c " .. H.quote([[
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
smuggled = b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
head = b"POST /api/v1/runs/" + sys.argv[2].encode() + b"/events HTTP/1.1\r\n" \
       b"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
body = b'{"name":"payment"}'
def ask(lengths, payload=body):
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(head + lengths + b"\r\n" + payload + smuggled)
    got = b""
    while True:
        more = s.recv(65536)
        if not more: break
        got += more
    head_, _, answer = got.partition(b"\r\n\r\n")
    print(got.count(b"HTTP/1.1 "), head_.split(b"\r\n")[0].decode(), answer.decode())
ask(b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(body), len(body) + len(smuggled)))
ask(b"content-length: 18\r\nTransfer-Encoding: chunked\r\n",
    b"12\r\n" + body + b"\r\n0\r\n\r\n")
ask(b"Content-Length: 18\r\nContent-Length: 18\r\nConnection: close\r\n")
]]) .. " " .. base:match("//([^/]+)") .. " " .. run.id)
    assert.are.equal(0, rc, out)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("^1 HTTP/1.1 400 Bad Request .*the request gives Content%-Length twice, 18 and "
                   .. "64: its body's length is not one %(RFC 9112, 6.3%)", lines[1])
    assert.matches("^1 HTTP/1.1 400 Bad Request .*both Content%-Length %(18%) and "
                   .. "Transfer%-Encoding %(chunked%)", lines[2])
    assert.matches("^1 HTTP/1.1 202 Accepted", lines[3])   -- one length, told twice
    local _, events = S.get(base, "/api/v1/runs/" .. run.id .. "/events")
    assert.are.equal(1, #(events.events or events))
  end)

  it("closes an idle keep-alive connection at once when stopped, answers one in progress",
     function()
    local dir, db = S.workspace()
    local base, pid = S.start(dir, db)
    local port = base:match(":(%d+)$")
    local rc, out = H.shell("python3 -c " .. H.quote([[
import os, signal, socket
get = b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
idle = socket.create_connection(("127.0.0.1", ]] .. port .. [[), timeout=20)
idle.sendall(get + b"\r\n")
got = b""
def whole(got):   # its whole answer, by its Content-Length or its last chunk
    head, sep, body = got.partition(b"\r\n\r\n")
    if not sep: return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return body.endswith(b"0\r\n\r\n")
while not whole(got):
    more = idle.recv(65536)
    assert more, "the connection closed before its answer: %r" % got
    got += more
half = socket.create_connection(("127.0.0.1", ]] .. port .. [[), timeout=20)
half.sendall(get)
os.kill(]] .. pid .. [[, signal.SIGTERM)
print("idle closed:", idle.recv(65536) == b"")
half.sendall(b"\r\n")
answer = b""
while True:
    more = half.recv(65536)
    if not more: break
    answer += more
print("half answered:", answer.split(b"\r\n")[0].decode())
]]))
    assert.are.equal(0, rc, out)
    assert.matches("idle closed: True\nhalf answered: HTTP/1.1 200 OK\n", out)
    H.wait_for("the server to stop", function()
      return not os.execute("kill -0 " .. pid .. " 2>/dev/null")
    end, 10)
  end)

  -- h2o sends a body of unknown length chunked only in a 200; any other answer (a start's
  -- 201, an event's 202, every error) went out with no length, ended by closing the
  -- connection: a client reconnected for each start and event, and a request it pipelined
  -- behind one was dropped unanswered.
  it("keeps the connection after an answer that is not 200 (201, 202, 400, 404, 405)", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local script = H.write_file(dir, "kept.py", [[
import http.client, json, sys
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
J = {"Content-Type": "application/json"}
seen = []
def ask(method, path, body=None):
    c.request(method, path, body=body, headers=J if body is not None else {})
    r = c.getresponse()
    data = r.read()
    seen.append((r.status, r.getheader("Content-Length"), r.will_close,
                 c.sock.getsockname()[1] if c.sock else None))
    return data
rid = json.loads(ask("POST", "/api/v1/runs", '{"workflow":"wait","input":{}}'))["id"]
ask("POST", "/api/v1/runs/%s/events" % rid, '{"name":"payment","data":{"amount":5}}')
ask("POST", "/api/v1/runs", "{")
ask("GET", "/api/v1/runs/nosuchrun")
ask("DELETE", "/api/v1/runs")
ask("GET", "/api/v1/runs")
print(json.dumps(seen))
]])
    local host, port = base:match("http://([%d%.]+):(%d+)")
    local rc, out = H.shell("python3 " .. H.quote(script) .. " " .. host .. " " .. port)
    assert.are.equal(0, rc, out)
    local seen = json.decode(out:match("(%b[])%s*$"))
    local statuses, ports = {}, {}
    for i, s in ipairs(seen) do
      statuses[i] = s[1]
      assert.is_false(s[3], "answer " .. i .. " closed its connection: " .. out)
      if s[1] ~= 200 then
        assert.truthy(tonumber(s[2]), "answer " .. i .. " has no Content-Length: " .. out)
      end
      ports[s[4]] = true
    end
    assert.are.same({ 201, 202, 400, 404, 405, 200 }, statuses)
    local n = 0
    for _ in pairs(ports) do n = n + 1 end
    assert.are.equal(1, n, "the requests took more than one connection: " .. out)
  end)
  -- /metrics went out with no length: chunked to an HTTP/1.1 client, and to an HTTP/1.0 one
  -- that asked to keep its connection (ApacheBench -k) with neither length nor close, so the
  -- client could not tell where the body ended and waited for the idle timeout.
  it("sends /metrics with its Content-Length, to an HTTP/1.0 keep-alive client too", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local script = H.write_file(dir, "metrics10.py", [[
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
out = []
for version in ("1.0", "1.1", "1.1"):
    method = "HEAD" if len(out) == 2 else "GET"
    c.sendall(("%s /metrics HTTP/%s\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n"
               % (method, version)).encode())
    data = b""
    def more():
        got = c.recv(65536)
        if not got:
            sys.exit("the server closed the connection")
        return got
    while b"\r\n\r\n" not in data:
        data += more()
    head, body = data.split(b"\r\n\r\n", 1)
    fields = dict(l.split(": ", 1) for l in head.decode().lower().split("\r\n")[1:])
    length = fields.get("content-length")
    if length is None:
        out.append("no length: " + head.decode().split("\r\n")[0]); break
    if method == "GET":
        while len(body) < int(length):
            body += more()
        out.append("%s %d %s" % (version, len(body), body.decode().count("\nmend_dlq_size ")))
    else:
        out.append("HEAD " + length)
print("; ".join(out))
]])
    local host, port = base:match("http://([%d%.]+):(%d+)")
    local rc, out = H.shell("python3 " .. H.quote(script) .. " " .. host .. " " .. port)
    assert.are.equal(0, rc, out)
    local n10, n11, head = out:match("^1%.0 (%d+) 1; 1%.1 (%d+) 1; HEAD (%d+)%s*$")
    assert.truthy(n10, out)
    assert.is_true(tonumber(n10) > 1000 and tonumber(n11) > 1000 and tonumber(head) > 1000, out)
  end)
  -- h2o refuses a chunked body once it reaches its limit (>=), a Content-Length only past it
  -- (>): a body of exactly --max-body bytes was taken with a length and refused chunked.
  it("takes a body of exactly --max-body bytes chunked as with a length, and refuses one more",
     function()
    local dir, db = S.workspace()
    local base = S.start(dir, db, "--listen 127.0.0.1:0 --max-body 100")
    local script = H.write_file(dir, "limit.py", [=[
import http.client, json, sys
out = []
for n in (100, 101):
    base = json.dumps({"workflow": "hello", "input": {"to": ""}})
    body = json.dumps({"workflow": "hello", "input": {"to": "x" * (n - len(base))}}).encode()
    assert len(body) == n
    for chunked in (False, True):
        c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=10)
        h = {"Content-Type": "application/json"}
        if chunked:
            h["Transfer-Encoding"] = "chunked"
            c.request("POST", "/api/v1/runs", body=iter([body[:50], body[50:]]), headers=h,
                      encode_chunked=True)
        else:
            c.request("POST", "/api/v1/runs", body=body, headers=h)
        r = c.getresponse()
        e = json.loads(r.read()).get("error") or {}
        out.append([n, chunked, r.status] + ([e["message"]] if e else []))
print(json.dumps(out))
]=])
    local host, port = base:match("http://([%d%.]+):(%d+)")
    local rc, out = H.shell("python3 " .. H.quote(script) .. " " .. host .. " " .. port)
    assert.are.equal(0, rc, out)
    local got = json.decode(out:match("(%b[])%s*$"))
    local over = "the request body is over the limit of 100 bytes"
    assert.are.same({ { 100, false, 201 }, { 100, true, 201 }, { 101, false, 413, over },
                      { 101, true, 413, over } }, got)
  end)
end)
