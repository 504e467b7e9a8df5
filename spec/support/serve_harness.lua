-- What the specs of `mend serve` share (serve_spec, serve_lock_spec): the workflows they serve,
-- a real server process on a free loopback port, requests with curl, and another process that
-- holds the database's write lock.
local H = require "spec.helper"
local mend = require "mend"
local assert = require "luassert"

local MEND, q, sh = H.MEND, H.quote, H.shell
local json = mend.json

local S = {}

-- A saga whose refund fails while the flag file exists: `mend run` leaves it a dead letter.
S.REFUND = [[
local mend = require "mend"
local assert = require "luassert"
return { name = "refund", compensate_retry = { max_attempts = 2, initial = 0.01, jitter = 0 },
  steps = {
    { name = "reserve", execute = function() return "r" end, compensate = function() end },
    { name = "charge", breaker = "psp", execute = function() return "c" end,
      compensate = function(ctx)
        local f = io.open(ctx.input.flag)
        if f then f:close(); error(mend.retryable("refund service down")) end
      end },
    { name = "ship", execute = function() error(mend.fatal("no courier")) end },
  } }
]]

S.WAIT = [[
return { name = "wait", steps = {
  { name = "paid", wait_for = "payment", timeout = 3600 },
  { name = "ship", execute = function(ctx) return { amount = ctx.results.paid.amount } end },
} }
]]

S.HELLO = [[
return { name = "hello", steps = {
  { name = "greet", execute = function(ctx, input) return { said = "hello " .. input.to } end },
  { name = "bye", execute = function() return "bye" end },
} }
]]

-- A directory with the workflows, and the database of the run's backend (a file in the
-- directory, or a fresh PostgreSQL database).
function S.workspace()
  local dir = H.tmp_dir()
  H.write_file(dir, "hello.lua", S.HELLO)
  H.write_file(dir, "refund.lua", S.REFUND)
  H.write_file(dir, "wait.lua", S.WAIT)
  return dir, H.new_db(dir, "serve.db")
end

-- A dead letter of `refund` in db (its compensation failed); returns its id and the flag
-- file that keeps the refund failing.
function S.dead_letter(dir, db, name)
  local flag = H.write_file(dir, name or "refund-down", "")
  local rc, out = sh(MEND .. " run " .. q(dir .. "/refund.lua") .. " --db " .. q(db) ..
                     " --clock virtual --input " .. q('{"flag":"' .. flag .. '"}') .. " --json")
  assert.are.equal(4, rc, out)
  return json.decode(out:match("(%b{})%s*$")).id, flag
end

local servers = {}
S.servers = servers

-- Starts `mend <command> --db db --listen 127.0.0.1:0 <args>` and waits until it says where
-- it listens. Returns the base URL ("http://127.0.0.1:PORT") and the process id.
function S.start(dir, db, args, command)
  local out, err = dir .. "/serve.out", dir .. "/serve.err"
  os.remove(out)
  local p = assert(io.popen(MEND .. " " .. (command or "serve") .. " --db " .. q(db) ..
                            " --workflows " .. q(dir) .. " " .. (args or "--listen 127.0.0.1:0") ..
                            " >" .. q(out) .. " 2>" .. q(err) .. " & echo $!"))
  local pid = p:read("l")
  p:close()
  servers[#servers + 1] = pid
  local base
  H.wait_for("the server to listen", function()
    base = H.read(out):match("serving (http://[%d%.]+:%d+)/api/v1")
    return base ~= nil or not os.execute("kill -0 " .. pid .. " 2>/dev/null")
  end, 10)
  assert(base, "the server did not start: " .. H.read(err))
  return base, pid
end

-- What the server S.start started in dir printed so far, its standard output then its errors.
function S.log(dir)
  return (H.read(dir .. "/serve.out") or "") .. (H.read(dir .. "/serve.err") or "")
end

-- Another process holds db's write lock, in the background; returns once it holds it (a loaded
-- machine can take longer than any fixed pause to start the holder) and a function that lets
-- it go: release() ends the transaction, waits until it has, and returns the instant it began
-- letting go (an answer that waited for the lock ends after it). The holder lets go by itself
-- after `seconds`, a bound for a test that fails before it calls release.
function S.hold_write_lock(db, seconds)
  local held, go, gone = os.tmpname(), os.tmpname(), os.tmpname()
  os.remove(held); os.remove(go); os.remove(gone)
  -- the hold: until `go` exists or `seconds` pass (20 looks a second)
  local wait = ("i=0; while [ ! -e %s ] && [ $i -lt %d ]; do sleep 0.05; i=$((i+1)); done")
    :format(go, seconds * 20)
  local hold = H.is_pg(db)
    and ("printf 'BEGIN;\\nLOCK TABLE runs IN EXCLUSIVE MODE;\\n"
         .. "\\\\! touch %s\\n\\\\! %s\\nCOMMIT;\\n' | psql -X -q %s")
        :format(held, wait, q(db))
    or ("(echo 'BEGIN IMMEDIATE; INSERT INTO audit(at, who, op) VALUES (1, ''spec'', ''hold'');'; "
        .. "echo '.shell touch %s'; %s; echo 'COMMIT;') | sqlite3 %s"):format(held, wait, q(db))
  sh("((" .. hold .. "); touch " .. gone .. ") >/dev/null 2>&1 &")
  local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
  end
  H.wait_for("another process to hold the write lock", function() return exists(held) end, 30)
  os.remove(held)
  return function()
    local at = H.wall()
    assert(io.open(go, "w")):close()
    H.wait_for("the other process to let the write lock go", function() return exists(gone) end,
               seconds + 30)
    os.remove(go); os.remove(gone)
    return at
  end
end

function S.stop_all()
  for i = #servers, 1, -1 do
    if os.execute("kill -0 " .. servers[i] .. " 2>/dev/null") then H.stop_worker(servers[i]) end
    servers[i] = nil
  end
end

-- For after_each: every server started stopped, every folder made removed.
function S.cleanup()
  S.stop_all()
  H.cleanup()
end

-- One request with curl. opts: body (text), headers (list), token, who, type (Content-Type of
-- a POST, default application/json). Returns the status, the decoded JSON body (nil if not
-- JSON), the raw body and the response's header text.
function S.http(base, method, path, opts)
  opts = opts or {}
  local body_file, out, hdr = os.tmpname(), os.tmpname(), os.tmpname()
  local cmd = { "curl -s -m 20 -o", q(out), "-D", q(hdr), "-w '%{http_code}' -X", method }
  if opts.body then
    local f = assert(io.open(body_file, "wb"))
    f:write(opts.body)
    f:close()
    cmd[#cmd + 1] = "--data-binary @" .. q(body_file)
  end
  if method == "POST" and opts.type ~= false then
    cmd[#cmd + 1] = "-H " .. q("Content-Type: " .. (opts.type or "application/json"))
  end
  if opts.token then cmd[#cmd + 1] = "-H " .. q("Authorization: Bearer " .. opts.token) end
  if opts.who then cmd[#cmd + 1] = "-H " .. q("X-Mend-Who: " .. opts.who) end
  for _, h in ipairs(opts.headers or {}) do cmd[#cmd + 1] = "-H " .. q(h) end
  cmd[#cmd + 1] = q(base .. path)
  local rc, code = sh(table.concat(cmd, " "))
  assert.are.equal(0, rc, "curl failed: " .. tostring(code))
  local raw, headers = H.read(out), H.read(hdr)
  os.remove(body_file); os.remove(out); os.remove(hdr)
  local ok, decoded = pcall(json.decode, raw)
  return tonumber(code), ok and decoded or nil, raw, headers
end

function S.get(base, path, opts) return S.http(base, "GET", path, opts) end
function S.post(base, path, body, opts)
  opts = opts or {}
  opts.body = body and (type(body) == "string" and body or json.encode(body)) or nil
  return S.http(base, "POST", path, opts)
end

function S.status_of(base, id)
  local code, run = S.get(base, "/api/v1/runs/" .. id)
  assert.are.equal(200, code)
  return run.status
end

-- A POST sent in the background: returns a function that waits for its answer (up to 20 s)
-- and gives its status, its decoded body, and the seconds it took.
function S.post_later(dir, base, path, body, name)
  local out, code = dir .. "/" .. name .. ".out", dir .. "/" .. name .. ".code"
  local trace = dir .. "/" .. name .. ".trace"
  sh(("(s=$(date +%%s.%%N); curl -s -m 20 --trace-ascii %s -o %s -w '%%{http_code}' " ..
      "-H 'Content-Type: application/json' -d %s %s >%s.tmp; e=$(date +%%s.%%N); " ..
      "echo \" $s $e\" >>%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
     :format(q(trace), q(out), q(json.encode(body)), q(base .. path), q(code), q(code), q(code),
             q(code)))
  -- returned once the request is written to the server's socket: what the caller does next
  -- (let a lock go) comes after it, however late a loaded machine starts curl
  H.wait_for("the request " .. name .. " to be sent", function()
    return H.read(trace):find("=> Send data", 1, true) ~= nil or H.read(code) ~= ""
  end, 20)
  return function()
    H.wait_for("the answer to " .. name, function() return H.read(code) ~= "" end, 25)
    local c, t0, t1 = H.read(code):match("^(%d+) ([%d.]+) ([%d.]+)")
    local ok, decoded = pcall(json.decode, H.read(out))
    return tonumber(c), ok and decoded or nil, tonumber(t1) - tonumber(t0), tonumber(t1)
  end
end

-- Waits until the server at base has read each request S.post_later sent it by these names
-- (in dir): each is answered, or held open for the commit of what it wrote, as under another
-- process's lock (its /metrics counts those). An answer read first is never counted twice.
function S.read_by(dir, base, names)
  H.wait_for(table.concat(names, ", ") .. " read by " .. base, function()
    local answered = 0
    for _, name in ipairs(names) do
      if (H.read(dir .. "/" .. name .. ".code") or "") ~= "" then answered = answered + 1 end
    end
    if answered == #names then return true end
    local _, _, text = S.get(base, "/metrics")
    local k = text and tonumber(text:match("\nmend_http_commit_waiting_requests (%d+)"))
    return k ~= nil and k + answered >= #names
  end, 15)
end

return S
