-- GET /api/v1/runs/{id}?wait=S, the long poll a client in another language waits for a run
-- with: real server processes (`mend serve` with a separate `mend worker` on the same
-- database, and `mend worker --listen` executing the run itself), spoken to with curl and raw
-- sockets. The answer comes when the run ends, well before S; after S with "wait": "timeout";
-- at once for an unknown run (404); once to each of many waiters; to every waiter when the
-- server stops; and a client that goes away leaves no waiter behind. Wall waits are kept to a
-- few seconds: the server's timers are the loop's, not the engine's virtual clock.
local H = require "spec.helper"
local mend = require "mend"

local q, sh = H.quote, H.shell
local json = mend.json

local S = require "spec.support.serve_harness"
local workspace, start, get, post = S.workspace, S.start, S.get, S.post

-- A GET sent in the background: returns a function that waits for its answer and gives its
-- status, its decoded body and the seconds it took.
local function get_later(dir, base, path, name)
  local out, code = dir .. "/" .. name .. ".out", dir .. "/" .. name .. ".code"
  sh(("(s=$(date +%%s.%%N); curl -s -m 70 -o %s -w '%%{http_code}' %s >%s.tmp; e=$(date +%%s.%%N); " ..
      "echo \" $s $e\" >>%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
     :format(q(out), q(base .. path), q(code), q(code), q(code), q(code)))
  return function(seconds)
    H.wait_for("the answer to " .. name, function() return H.read(code) ~= "" end, seconds or 25)
    local c, t0, t1 = H.read(code):match("^(%d+) ([%d.]+) ([%d.]+)")
    local ok, decoded = pcall(json.decode, H.read(out))
    return tonumber(c), ok and decoded or nil, tonumber(t1) - tonumber(t0)
  end
end

local function waiting_requests(base)
  local code, _, raw = get(base, "/metrics")
  assert.are.equal(200, code)
  return tonumber(raw:match("\nmend_http_waiting_requests (%d+)"))
end

local function start_wait_run(base)
  local code, r = post(base, "/api/v1/runs", { workflow = "wait" })
  assert.are.equal(201, code)
  return r.id
end

local function pay(base, id)
  local code = post(base, "/api/v1/runs/" .. id .. "/events", { name = "payment", data = { amount = 7 } })
  assert.are.equal(202, code)
end

-- n raw connections, each sending GET path once; prints, once all are answered (or `seconds`
-- pass), one line per connection: its status, the body's "wait" and how many answers it got
-- (read to the server's close).
local MANY = [[
import json, socket, sys, time
port, path, n, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n" % path).encode())
    conns.append(s)
print("sent", flush=True)
deadline = time.time() + seconds
for s in conns:
    data = b""
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        while True:   # to the server's close: a second answer would be read too
            got = s.recv(65536)
            if not got:
                break
            data += got
        head, body = data.split(b"\r\n\r\n", 1)
        if b"transfer-encoding: chunked" in head.lower():
            body = body.split(b"\r\n", 1)[1]
        print(head.split(b" ")[1].decode(), json.loads(body[:body.index(b"}\n") + 1]).get("wait"),
              data.count(b"HTTP/1.1 "), flush=True)
    except Exception as e:
        print("none", type(e).__name__, 0, flush=True)
]]

local function many_later(dir, base, path, n, seconds)
  local script = H.write_file(dir, "many.py", MANY)
  local out = dir .. "/many.out"
  local port = base:match(":(%d+)$")
  sh(("python3 %s %s %s %d %g >%s 2>&1 &"):format(q(script), port, q(path), n, seconds, q(out)))
  H.wait_for("the waiters to be sent", function() return H.read(out):find("sent") ~= nil end, 20)
  return function()
    H.wait_for("every waiter's line", function()
      local _, lines = H.read(out):gsub("\n", "")
      return lines >= n + 1
    end, seconds + 10)
    local got = {}
    for line in H.read(out):gmatch("[^\n]+") do
      if line ~= "sent" then got[#got + 1] = line end
    end
    return got
  end
end

describe("GET /api/v1/runs/{id}?wait=S", function()
  after_each(S.cleanup)

  it("answers when a separate mend worker ends the run, well before S", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local log = dir .. "/worker.log"
    S.servers[#S.servers + 1] = tostring(H.start_worker(db, dir, log, "--poll 0.05"))
    local id = start_wait_run(base)
    H.wait_for("the run to wait for its event", function()
      local _, run = get(base, "/api/v1/runs/" .. id)
      return run.steps[1].status == "waiting"
    end, 10)
    local answer = get_later(dir, base, "/api/v1/runs/" .. id .. "?wait=30", "w")
    H.wait_for("the waiter", function() return waiting_requests(base) == 1 end, 5)
    pay(base, id)
    local code, run, took = answer()
    assert.are.equal(200, code)
    assert.are.equal("ended", run.wait)
    assert.are.equal("succeeded", run.status)
    assert.are.same({ amount = 7 }, run.steps[2].result)
    assert.is_true(took < 10, "took " .. took .. " s")
    assert.are.equal(0, waiting_requests(base))
  end)

  it("answers when this process (mend worker --listen) ends the run", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --poll 0.05", "worker")
    local id = start_wait_run(base)
    local answer = get_later(dir, base, "/api/v1/runs/" .. id .. "?wait=30", "w")
    H.wait_for("the waiter", function() return waiting_requests(base) == 1 end, 5)
    pay(base, id)
    local code, run, took = answer()
    assert.are.equal(200, code)
    assert.are.equal("ended", run.wait)
    assert.are.equal("succeeded", run.status)
    assert.is_true(took < 10, "took " .. took .. " s")
  end)

  it("answers a run that has ended at once, and a dead letter as ended", function()
    local dir, db = workspace()
    local id = S.dead_letter(dir, db)
    local base = start(dir, db)
    local code, run = get(base, "/api/v1/runs/" .. id .. "?wait=30")
    assert.are.equal(200, code)
    assert.are.equal("ended", run.wait)
    assert.are.equal("needs_attention", run.status)
  end)

  it("after S seconds answers the run as it is, with \"wait\": \"timeout\"", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local id = start_wait_run(base)
    local answer = get_later(dir, base, "/api/v1/runs/" .. id .. "?wait=1", "w")
    local code, run, took = answer()
    assert.are.equal(200, code)
    assert.are.equal("timeout", run.wait)
    assert.are.equal("running", run.status)
    assert.are.equal(id, run.id)
    assert.is_true(took >= 1 and took < 5, "took " .. took .. " s")
    -- wait=0: a look, no wait
    local code0, run0 = get(base, "/api/v1/runs/" .. id .. "?wait=0")
    assert.are.equal(200, code0)
    assert.are.equal("timeout", run0.wait)
    -- without wait the answer is the run alone, as before
    local _, plain = get(base, "/api/v1/runs/" .. id)
    assert.is_nil(plain.wait)
  end)

  it("refuses an unknown run (404) and a wait out of bounds (400) at once", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, body = get(base, "/api/v1/runs/no-such-run?wait=30")
    assert.are.equal(404, code)
    assert.are.equal("not_found", body.error.code)
    local id = start_wait_run(base)
    for _, bad in ipairs({ "61", "-1", "abc", "1e1", "inf", "0x5", "30s" }) do
      local c, b = get(base, "/api/v1/runs/" .. id .. "?wait=" .. bad)
      assert.are.equal(400, c, bad)
      assert.are.equal("bad_query", b.error.code, bad)
    end
    local c, b = get(base, "/api/v1/runs/" .. id .. "?wait=1&wait=2")
    assert.are.equal(400, c)
    assert.are.equal("bad_query", b.error.code)
    assert.are.equal(0, waiting_requests(base))
  end)

  it("lets go of a client that disconnects before the run ends", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local id = start_wait_run(base)
    -- curl gives up after 0.5 s of a 30 s wait, closing its connection
    local rc = sh("curl -s -m 0.5 " .. q(base .. "/api/v1/runs/" .. id .. "?wait=30"))
    assert.are_not.equal(0, rc)
    H.wait_for("the waiter to be let go", function() return waiting_requests(base) == 0 end, 3)
  end)

  it("answers each of 190 concurrent waiters once, when the run ends", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local log = dir .. "/worker.log"
    S.servers[#S.servers + 1] = tostring(H.start_worker(db, dir, log, "--poll 0.05"))
    local id = start_wait_run(base)
    local other = start_wait_run(base)
    local answers = many_later(dir, base, "/api/v1/runs/" .. id .. "?wait=30", 190, 25)
    H.wait_for("the waiters", function() return waiting_requests(base) == 190 end, 10)
    pay(base, id)
    local got = answers()
    assert.are.equal(190, #got)
    for _, line in ipairs(got) do assert.are.equal("200 ended 1", line) end
    assert.are.equal(0, waiting_requests(base))
    assert.are.equal("running", S.status_of(base, other))
  end)

  it("answers every waiter with the run as it is when mend serve stops", function()
    local dir, db = workspace()
    local base, pid = start(dir, db)
    local id = start_wait_run(base)
    local answers = many_later(dir, base, "/api/v1/runs/" .. id .. "?wait=30", 20, 15)
    H.wait_for("the waiters", function() return waiting_requests(base) == 20 end, 10)
    H.stop_worker(pid)
    local got = answers()
    assert.are.equal(20, #got)
    for _, line in ipairs(got) do assert.are.equal("200 stopping 1", line) end
  end)
end)
