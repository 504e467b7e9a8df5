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
while not got.endswith(b"0\r\n\r\n"): got += idle.recv(65536)   # its whole chunked answer
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
end)
