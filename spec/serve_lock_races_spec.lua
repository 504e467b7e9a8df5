-- Races under another process's lock: `mend serve` and `mend worker --listen` on one SQLite
-- file, two servers asked the same thing while another process holds the write lock (two
-- resolves, a resolve and a retry, one key, one new version), a batch that fails under it, a
-- server stopped under it. Each is answered as docs/http-api.md says, and recorded once.
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"
local workspace, start, stop_all = S.workspace, S.start, S.stop_all
local hold_write_lock, post_later, status_of = S.hold_write_lock, S.post_later, S.status_of
local get, post, read_by = S.get, S.post, S.read_by

local MEND, q, sh = H.MEND, H.quote, H.shell
local json = mend.json

local function took(fn)
  local t0 = H.wall()
  local a, b, c = fn()
  return H.wall() - t0, a, b, c
end

local function waiting_run(base, key)
  local code, r = post(base, "/api/v1/runs", { workflow = "wait", key = key })
  assert.are.equal(201, code, json.encode(r))
  return r.id
end

local SHIPPING = [[
return { name = "shipping", steps = {
  { name = "pack", retry = { max_attempts = 1 },
    execute = function() error(require("mend").retryable("carrier down")) end } } }
]]
local ORDER = [[
return { name = "order", steps = {
  { name = "charge", execute = function() return { charged = 5 } end, compensate = function() end },
  { name = "ship", child = "shipping", input = function(ctx) return { order = 1 } end },
  { name = "confirm", execute = function() return "ok" end },
} }
]]

-- The repairs of one dead letter asked of two servers at once (both requests sent by one
-- shell, a few milliseconds apart): each server looks at the run before either writes. Exactly
-- one takes effect; the other is refused 409 naming the run's state, as once the first is
-- seen; one operator row in the run's history; a refused retry leaves the run held by nobody.
-- Sends both; returns a function that waits for their answers.
local function both(dir, a, path_a, body_a, b, path_b, body_b, tag)
  local function curl(base, path, body, name)
    local out, code = dir .. "/" .. tag .. name .. ".out", dir .. "/" .. tag .. name .. ".code"
    return ("(curl -s -m 20 -o %s -w '%%{http_code}' -H 'Content-Type: application/json' -d %s %s " ..
            ">%s.tmp; mv %s.tmp %s) &"):format(q(out), q(json.encode(body)), q(base .. path),
                                               q(code), q(code), q(code)), out, code
  end
  local ca, oa, fa = curl(a, path_a, body_a, "a")
  local cb, ob, fb = curl(b, path_b, body_b, "b")
  sh("(" .. ca .. " " .. cb .. ") >/dev/null 2>&1")
  local function answer(out, code)
    H.wait_for("the answer " .. code, function() return H.read(code) ~= "" end, 25)
    local ok, decoded = pcall(json.decode, H.read(out))
    return tonumber(H.read(code)), ok and decoded or nil
  end
  return function()
    local c1, b1 = answer(oa, fa)
    local c2, b2 = answer(ob, fb)
    return c1, b1, c2, b2
  end
end

local function operator_rows(base, id)
  local _, history = get(base, "/api/v1/runs/" .. id .. "/history")
  local ops = {}
  for _, h in ipairs(history) do
    if h.event == "operator" then ops[#ops + 1] = h.detail end
  end
  return ops
end

-- One took effect (answered won_a on a, or won_b on b), the other was refused 409 naming the
-- state the first left the run in.
local function one_took_effect(db, base, id, ca, ba, cb, bb, won_a, won_b)
  local st = H.sql(db, "SELECT status FROM runs WHERE id = '" .. id .. "'")[1]
  local ops = operator_rows(base, id)
  local why = json.encode({ ca, ba, cb, bb, st, ops })
  assert.is_true((ca == won_a and cb == 409) or (cb == won_b and ca == 409), why)
  local refused = ca == 409 and ba or bb
  assert.are.equal("conflict", refused.error.code, why)
  assert.is_truthy(refused.error.message:find("run " .. id .. " is %l+:"), why)
  assert.is_falsy(refused.error.message:find("needs_attention", 1, true), why)
  assert.are.equal(1, #ops, why)
  return st, ops, why
end

-- A resolve on a and one on b, sent; returns the function that checks their answers.
local function resolve_twice(dir, db, id, a, b, tag)
  local answers = both(dir, a, "/api/v1/dlq/" .. id .. "/resolve", { note = "by alice" },
                       b, "/api/v1/dlq/" .. id .. "/resolve", { note = "by bob" }, tag)
  return function()
    local ca, ba, cb, bb = answers()
    local st, _, why = one_took_effect(db, a, id, ca, ba, cb, bb, 200, 200)
    assert.are.equal("resolved", st, why)
  end
end

-- A resolve on a, a retry on b, sent; the function returned checks their answers: a refused
-- retry holds nothing.
local function resolve_and_retry(dir, db, id, a, b, tag)
  local answers = both(dir, a, "/api/v1/dlq/" .. id .. "/resolve", { note = "by alice" },
                       b, "/api/v1/dlq/" .. id .. "/retry", {}, tag)
  return function()
    local ca, ba, cb, bb = answers()
    local st, ops, why = one_took_effect(db, a, id, ca, ba, cb, bb, 200, 202)
    if ca == 200 then
      assert.are.equal("resolved", st, why)
      assert.are.same({ "" }, H.sql(db, "SELECT coalesce(owner, '') FROM runs WHERE id = '" .. id .. "'"), why)
    else
      assert.are_not.equal("resolved", st, why)
      assert.is_truthy(ops[1]:find("dlq retry", 1, true), why)
    end
  end
end

-- n dead letters of refund (whose compensation, retried, succeeds unless keep_failing).
local function dead_letters(dir, db, n, keep_failing)
  local ids = {}
  for i = 1, n do
    local id, flag = S.dead_letter(dir, db, "down" .. i)
    if not keep_failing then os.remove(flag) end
    ids[i] = id
  end
  return ids
end

-- n dead letters repaired on two servers at once by `repair` (resolve_twice or
-- resolve_and_retry), under another process's write lock when `lock`: without it each pair is
-- checked before the next is sent; under it every pair is sent, then the lock let go, then the
-- first checked (each waited for the lock).
local function repairs_at_once(n, keep_failing, repair, tag, lock)
  local dir, db = workspace()
  local ids = dead_letters(dir, db, n, keep_failing)
  local a = start(dir, db)
  local b = start(dir, db)
  local release = lock and hold_write_lock(db, 30)
  local checks = {}
  for i, id in ipairs(ids) do
    checks[i] = repair(dir, db, id, a, b, tag .. i)
    if not lock then checks[i]() end
  end
  if lock then
    -- every pair read by its servers under the lock
    local on_a, on_b = {}, {}
    for i = 1, #ids do on_a[i], on_b[i] = tag .. i .. "a", tag .. i .. "b" end
    read_by(dir, a, on_a)
    read_by(dir, b, on_b)
    release()
    for _, check in ipairs(checks) do check() end
  end
end

describe("two servers' repairs of one dead letter at once, without a lock", function()
  after_each(function()
    stop_all()
    H.cleanup()
  end)

  it("two resolves: one resolved, the other refused 409 naming the state", function()
    repairs_at_once(5, true, resolve_twice, "r")
  end)

  it("a resolve and a retry: one done, the other refused 409 naming the state", function()
    repairs_at_once(5, false, resolve_and_retry, "x")
  end)
end)

describe("two servers and a worker under another process's write lock #sqlite", function()
  after_each(function()
    stop_all()
    H.cleanup()
  end)

  it("two servers' resolves of one dead letter under the lock: one is resolved, the other refused", function()
    repairs_at_once(3, true, resolve_twice, "lock", true)
  end)

  it("a resolve on one server and a retry on another under the lock: one done, the other refused", function()
    repairs_at_once(3, false, resolve_and_retry, "lock", true)
  end)

  it("a keyed event from the server and `mend signal` under the lock: one event, one sent", function()
    local dir, db = workspace()
    local a = start(dir, db)
    local id = waiting_run(a, "w-cli")
    local release = hold_write_lock(db, 30)
    local out = dir .. "/signal.out"
    sh(("(%s signal %s payment --key k1 --data 7 --db %s >%s 2>&1; echo rc=$? >>%s)"
        .. " >/dev/null 2>&1 &")
       :format(MEND, id, q(db), q(out), q(out)))
    local ans = post_later(dir, a, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "k1", data = 1 }, "ev")
    os.execute("sleep 0.5")   -- both wait for the lock
    release()
    local c, body = ans()
    H.wait_for("mend signal", function() return H.read(out):match("rc=%d") ~= nil end, 15)
    local cli = H.read(out)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key = 'k1'"))
    local cli_sent = cli:match("rc=0") and not cli:match("already")
    local srv_sent = c == 202
    assert.is_true(c == 200 or c == 202, json.encode(body))
    assert.is_true((cli_sent and 1 or 0) + (srv_sent and 1 or 0) == 1, cli .. " / " .. json.encode(body))
  end)

  it("a batch that fails under the lock answers every request attached to it 503", function()
    local dir, db = workspace()
    local dead = S.dead_letter(dir, db)
    local a = start(dir, db)
    local id = waiting_run(a, "w-fail")
    local other = waiting_run(a, "w-fail-2")
    -- the batch fails as a full disk would make it: one of its inserts is refused
    H.sql(db, "CREATE TRIGGER boom BEFORE INSERT ON inbox WHEN NEW.key = 'boom' " ..
              "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    local release = hold_write_lock(db, 30)
    local answers = {
      post_later(dir, a, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "ok", data = 1 }, "ok"),
      post_later(dir, a, "/api/v1/dlq/" .. dead .. "/resolve", { note = "n" }, "resolve"),
      post_later(dir, a, "/api/v1/runs/" .. other .. "/cancel", {}, "cancel"),
    }
    read_by(dir, a, { "ok", "resolve", "cancel" })
    answers[#answers + 1] = post_later(dir, a, "/api/v1/runs/" .. id .. "/events",
                                       { name = "payment", key = "boom", data = 2 }, "boom")
    read_by(dir, a, { "ok", "resolve", "cancel", "boom" })   -- all four in the batch that waits
    release()
    for i, ans in ipairs(answers) do
      local c, body = ans()
      assert.are.equal(503, c, i .. ": " .. json.encode(body))
    end
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox"))
    assert.are.same({ "needs_attention" }, H.sql(db, "SELECT status FROM runs WHERE id = '" .. dead .. "'"))
  end)

  it("a server stopped while requests wait for the lock tells none of them done that is not", function()
    local dir, db = workspace()
    local dead = S.dead_letter(dir, db)
    local a, pid = start(dir, db)
    local id = waiting_run(a, "w-stop")
    local release = hold_write_lock(db, 30)
    local ev = post_later(dir, a, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "k", data = 1 }, "ev")
    local res = post_later(dir, a, "/api/v1/dlq/" .. dead .. "/resolve", { note = "n" }, "res")
    read_by(dir, a, { "ev", "res" })
    os.execute("kill -TERM " .. pid)
    local c1, b1 = ev()
    local c2, b2 = res()
    H.wait_for("the server to stop", function() return not os.execute("kill -0 " .. pid .. " 2>/dev/null") end, 15)
    release()
    local kept = H.sql(db, "SELECT count(*) FROM inbox")[1]
    local st = H.sql(db, "SELECT status FROM runs WHERE id = '" .. dead .. "'")[1]
    assert.is_true(c1 ~= 202 or kept == "1")
    assert.is_true(c2 ~= 200 or st == "resolved")
  end)

  it("a worker --listen answers reads while a cancel of a run it holds parked waits for the lock", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --poll 0.05 --log-level debug", "worker")
    local id = waiting_run(base, "w-parked")
    -- parked after park_after (1 s): its log says so
    H.wait_for("the run to be parked", function()
      for line in S.log(dir):gmatch("[^\n]+") do
        local parked = line:find('"message":"parked: ', 1, true)
        if parked and line:find('"run":"' .. id .. '"', 1, true) then return true end
      end
    end, 15)
    local release = hold_write_lock(db, 30)
    -- a start waits for the lock: the writer thread retries its batch meanwhile
    local started = post_later(dir, base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } }, "start")
    read_by(dir, base, { "start" })
    local t0 = took(function() return get(base, "/api/v1") end)
    local cancel = post_later(dir, base, "/api/v1/runs/" .. id .. "/cancel", {}, "cancel")
    read_by(dir, base, { "start", "cancel" })
    local t = took(function() return get(base, "/api/v1") end)
    release()
    local c, body, waited = cancel()
    assert.are.equal(201, (started()))
    assert.is_true(c == 202, json.encode(body))
    assert.is_true(t < 1, "GET /api/v1 while the cancel waited took " .. t .. " s (before it: " .. t0 ..
                   " s; the cancel " .. waited .. " s)")
  end)

  it("the first start of a new version with one key on two servers under the lock: one run", function()
    local dir, db = workspace()
    local a = start(dir, db)
    local b = start(dir, db)
    local release = hold_write_lock(db, 30)
    local ra = post_later(dir, a, "/api/v1/runs", { workflow = "refund", input = {}, key = "same" }, "ra")
    local rb = post_later(dir, b, "/api/v1/runs", { workflow = "refund", input = {}, key = "same" }, "rb")
    read_by(dir, a, { "ra" })   -- both read by their servers under the lock
    read_by(dir, b, { "rb" })
    release()
    local ca, ba = ra()
    local cb, bb = rb()
    local codes = { ca, cb }
    table.sort(codes)
    assert.are.same({ 200, 201 }, codes, json.encode({ ba, bb }))
    assert.are.equal(ba.id, bb.id)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM workflow_versions"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs r LEFT JOIN workflow_versions v " ..
                                       "ON v.id = r.workflow_version WHERE v.id IS NULL"))
  end)

  it("a worker --listen takes a keyed event sent twice under the lock to a run it holds once", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --poll 0.05", "worker")
    local id = waiting_run(base, "w-held")
    H.wait_for("the run to wait", function()
      return H.sql(db, "SELECT status FROM steps WHERE run_id = '" .. id .. "' AND name = 'paid'")[1] == "waiting"
    end, 10)
    local release = hold_write_lock(db, 30)
    local e1 = post_later(dir, base, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "p", data = { amount = 5 } }, "e1")
    local e2 = post_later(dir, base, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "p", data = { amount = 6 } }, "e2")
    read_by(dir, base, { "e1", "e2" })   -- both read under the lock
    release()
    local c1, b1 = e1()
    local c2, b2 = e2()
    local codes = { c1, c2 }
    table.sort(codes)
    assert.are.same({ 200, 202 }, codes, json.encode({ b1, b2 }))
    H.wait_for("the run to succeed", function() return status_of(base, id) == "succeeded" end, 10)
    local _, run = get(base, "/api/v1/runs/" .. id)
    local ship
    for _, st in ipairs(run.steps) do if st.name == "ship" then ship = st.result end end
    assert.are.same({ amount = c1 == 202 and 5 or 6 }, ship)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox"))
  end)
end)
