-- `mend serve` on a SQLite file while another process holds its write lock (someone in the
-- `sqlite3` shell inside BEGIN IMMEDIATE): a write that must wait for the lock is answered once
-- it is committed, with the answer it would have had without the lock, and the server answers
-- everything else meanwhile. PostgreSQL has no such lock: these are SQLite's.
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"
local workspace, start, stop_all = S.workspace, S.start, S.stop_all
local hold_write_lock, post_later, status_of = S.hold_write_lock, S.post_later, S.status_of
local get, post, read_by = S.get, S.post, S.read_by

local MEND, q, sh = H.MEND, H.quote, H.shell
local json = mend.json

-- A read answered within a second while the lock is held.
local function answered_at_once(base, path)
  local t0 = H.wall()
  local code, body = get(base, path)
  assert.are.equal(200, code, path .. ": " .. json.encode(body))
  assert.is_true(H.wall() - t0 < 1, path .. " answered after " .. (H.wall() - t0) .. " s")
end

-- A run of `wait` started through the API, running, that no worker holds.
local function waiting_run(base, key)
  local code, r = post(base, "/api/v1/runs", { workflow = "wait", key = key })
  assert.are.equal(201, code, json.encode(r))
  return r.id
end

describe("mend serve under another process's write lock #sqlite", function()
  after_each(function()
    stop_all()
    H.cleanup()
  end)

  it("answers an event with a key once its batch is committed: one event per key, across two servers", function()
    local dir, db = workspace()
    local a = start(dir, db)
    local b = start(dir, db)
    local id = waiting_run(a, "w-keyed")
    local code, first = post(a, "/api/v1/runs/" .. id .. "/events",
                             { name = "payment", key = "before", data = 0 })
    assert.are.equal(202, code, json.encode(first))
    local release = hold_write_lock(db, 30)
    -- the same key from both servers, a key sent before the lock, and one by run key
    local answers = {
      post_later(dir, a, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "k1", data = 1 }, "a1"),
      post_later(dir, b, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "k1", data = 2 }, "b1"),
      post_later(dir, a, "/api/v1/runs/" .. id .. "/events", { name = "payment", key = "k1", data = 3 }, "a2"),
    }
    local before = post_later(dir, b, "/api/v1/runs/" .. id .. "/events",
                              { name = "payment", key = "before", data = 4 }, "before")
    local by_key = post_later(dir, a, "/api/v1/events",
                              { run_key = "w-keyed", name = "note", key = "n1", data = 5 }, "by_key")
    read_by(dir, a, { "a1", "a2", "by_key" })
    read_by(dir, b, { "b1", "before" })
    -- meanwhile both servers answer the rest at once
    for _, base in ipairs { a, b } do
      answered_at_once(base, "/api/v1")
      answered_at_once(base, "/api/v1/runs/" .. id)
      answered_at_once(base, "/api/v1/runs/" .. id .. "/events")
    end
    local released = release()
    local sent = 0
    for i, answer in ipairs(answers) do
      local c, body, _, done = answer()
      assert.is_true(c == 202 or c == 200, i .. ": " .. tostring(c) .. " " .. json.encode(body))
      assert.is_true(done >= released, "answered before the lock went")
      assert.are.equal(id, body.run)
      if c == 202 then
        assert.are.same({ run = id, event = "payment", sent = true }, body)
        sent = sent + 1
      else
        assert.are.same({ run = id, event = "payment", sent = false, duplicate = true }, body)
      end
    end
    assert.are.equal(1, sent)
    local c, body = before()
    assert.are.equal(200, c, json.encode(body))
    assert.is_true(body.duplicate)
    c, body = by_key()
    assert.are.equal(202, c, json.encode(body))
    assert.are.same({ run = id, event = "note", sent = true }, body)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key = 'k1'"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key = 'before'"))
    -- the CLI after the lock: a duplicate too, and the run takes the event kept
    local rc, out = sh(MEND .. " signal " .. id .. " payment --key k1 --data 9 --db " .. q(db))
    assert.are.equal(0, rc, out)
    assert.matches("already", out)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key = 'k1'"))
    assert.are.equal("running", status_of(a, id))
  end)
  it("answers the first start of a workflow version once the lock goes, known before or new", function()
    local dir, db = workspace()
    local a = start(dir, db)
    local code, first = post(a, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })
    assert.are.equal(201, code, json.encode(first))
    -- b starts after hello's version is committed: its first start of it looks the number up;
    -- refund's version is new to the database, numbered as its first batch is written
    local b = start(dir, db)
    local release = hold_write_lock(db, 30)
    local answers = {
      post_later(dir, b, "/api/v1/runs", { workflow = "hello", input = { to = "bob" } }, "hello"),
      post_later(dir, b, "/api/v1/runs", { workflow = "refund", input = {} }, "refund_b"),
      post_later(dir, a, "/api/v1/runs", { workflow = "refund", input = {}, key = "r-a" }, "refund_a"),
    }
    read_by(dir, b, { "hello", "refund_b" })
    read_by(dir, a, { "refund_a" })
    for _, base in ipairs { a, b } do
      answered_at_once(base, "/api/v1")
      answered_at_once(base, "/api/v1/runs/" .. first.id)
      answered_at_once(base, "/api/v1/workflows")
    end
    local released = release()
    local ids = {}
    for i, answer in ipairs(answers) do
      local c, r, _, done = answer()
      assert.are.equal(201, c, i .. ": " .. json.encode(r))
      assert.is_true(done >= released, "answered before the lock went")
      ids[i] = r.id
    end
    assert.are.same({ "4" }, H.sql(db, "SELECT count(*) FROM runs"))
    -- one row per version, each run on its own, the script kept
    assert.are.same({ "hello|1", "refund|1" }, H.sql(db, "SELECT workflow || '|' || count(*) FROM " ..
                    "workflow_versions GROUP BY workflow ORDER BY workflow"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM workflow_versions WHERE script IS NULL"))
    for i, id in ipairs(ids) do
      local wf = i == 1 and "hello" or "refund"
      assert.are.same({ wf }, H.sql(db, "SELECT v.workflow FROM runs r JOIN workflow_versions v " ..
                                        "ON v.id = r.workflow_version WHERE r.id = '" .. id .. "'"))
      assert.are.equal("running", status_of(b, id))
    end
    -- and later starts of the version number theirs at once
    code = post(b, "/api/v1/runs", { workflow = "refund", input = {} })
    assert.are.equal(201, code)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM workflow_versions WHERE workflow = 'refund'"))
  end)
  it("answers a dead letter's resolve once it is committed; a second one is refused as after", function()
    local dir, db = workspace()
    local id = S.dead_letter(dir, db)
    local base = start(dir, db)
    local release = hold_write_lock(db, 30)
    local first = post_later(dir, base, "/api/v1/dlq/" .. id .. "/resolve", { note = "refunded by hand" }, "resolve")
    read_by(dir, base, { "resolve" })
    answered_at_once(base, "/api/v1/dlq")
    answered_at_once(base, "/api/v1/runs/" .. id)
    local again = post_later(dir, base, "/api/v1/dlq/" .. id .. "/resolve", { note = "twice" }, "again")
    read_by(dir, base, { "resolve", "again" })   -- read under the lock too, while the first waits
    local released = release()
    local c, body, _, done = first()
    assert.are.equal(200, c, json.encode(body))
    assert.are.same({ id = id, status = "resolved" }, body)
    assert.is_true(done >= released, "answered before the lock went")
    c, body = again()
    assert.are.equal(409, c, json.encode(body))
    assert.matches("is resolved", body.error.message)
    assert.are.same({ "resolved" }, H.sql(db, "SELECT status FROM runs WHERE id = '" .. id .. "'"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM dlq"))
    local _, history = get(base, "/api/v1/runs/" .. id .. "/history")
    local notes = {}
    for _, h in ipairs(history) do
      if h.event == "operator" then notes[#notes + 1] = h.detail end
    end
    assert.are.equal(1, #notes)
    assert.matches("^dlq resolve by .*: refunded by hand$", notes[1])
  end)

  it("answers a cancel of a run a worker holds once the request is committed", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local worker = H.spawn_worker(db, dir, dir .. "/worker.log")
    S.servers[#S.servers + 1] = worker
    local id = waiting_run(base, "w-cancel")
    H.wait_for("the worker to hold the run", function()
      return H.sql(db, "SELECT count(*) FROM runs WHERE id = '" .. id .. "' AND owner IS NOT NULL")[1] == "1"
    end, 10)
    local release = hold_write_lock(db, 30)
    local answer = post_later(dir, base, "/api/v1/runs/" .. id .. "/cancel", {}, "cancel")
    read_by(dir, base, { "cancel" })
    answered_at_once(base, "/api/v1")
    answered_at_once(base, "/api/v1/runs/" .. id)
    local released = release()
    local c, body, _, done = answer()
    assert.are.equal(202, c, json.encode(body))
    assert.are.same({ id = id, cancel = "requested" }, body)
    assert.is_true(done >= released, "answered before the lock went")
    -- the worker takes the request at its next poll: the run stops
    H.wait_for("the run to be cancelled", function() return status_of(base, id) == "failed" end, 10)
  end)
  it("answers a cancel of a run nobody holds, and a dead letter's retry, once the lock goes", function()
    local dir, db = workspace()
    local dead, flag = S.dead_letter(dir, db)
    os.remove(flag)   -- the refund works again: a retry compensates the run
    local base = start(dir, db)
    local id = waiting_run(base, "w-nobody")
    local release = hold_write_lock(db, 30)
    local cancel = post_later(dir, base, "/api/v1/runs/" .. id .. "/cancel", {}, "cancel")
    local retry = post_later(dir, base, "/api/v1/dlq/" .. dead .. "/retry", {}, "retry")
    read_by(dir, base, { "cancel", "retry" })
    answered_at_once(base, "/api/v1")
    answered_at_once(base, "/api/v1/runs/" .. id)
    answered_at_once(base, "/api/v1/dlq")
    local released = release()
    local c, body, _, done = cancel()
    assert.are.equal(202, c, json.encode(body))
    assert.are.same({ id = id, cancel = "cancelling" }, body)
    assert.is_true(done >= released, "answered before the lock went")
    c, body, _, done = retry()
    assert.are.equal(202, c, json.encode(body))
    assert.are.same({ id = dead, dlq = "retrying" }, body)
    assert.is_true(done >= released, "answered before the lock went")
    -- this server carries both on: the cancelled run fails, the retried one is compensated
    H.wait_for("the runs to end", function()
      return status_of(base, id) == "failed" and status_of(base, dead) == "compensated"
    end, 10)
    -- who asked is in each run's history, as without the lock
    for _, run in ipairs { { id, "^cancel by http 127" }, { dead, "^dlq retry by http 127" } } do
      local _, history = get(base, "/api/v1/runs/" .. run[1] .. "/history")
      local said
      for _, h in ipairs(history) do
        if h.event == "operator" then said = h.detail end
      end
      assert.matches(run[2], said)
    end
    -- a second retry finds it no dead letter any more
    c = post(base, "/api/v1/dlq/" .. dead .. "/retry", {})
    assert.are.equal(409, c)
  end)

  it("says in its log, when stopped, that a start waiting for the lock was left unanswered", function()
    local dir, db = workspace()
    local base, pid = start(dir, db)
    local release = hold_write_lock(db, 30)
    local answer = post_later(dir, base, "/api/v1/runs", { workflow = "hello", key = "cut-short",
                                                           input = { to = "x" } }, "cut")
    read_by(dir, base, { "cut" })
    H.stop_worker(pid)
    local code = answer()
    assert.are.equal(0, code)   -- curl: the connection closed, no answer
    release()
    -- h2o's request and connection freed, not kept to the end: seen where MEND_BIN is built
    -- with AddressSanitizer and run with ASAN_OPTIONS=detect_leaks=1
    assert.falsy(H.read(dir .. "/serve.err"):find("LeakSanitizer", 1, true), H.read(dir .. "/serve.err"))
    local said
    for line in H.read(dir .. "/serve.err"):gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.event == "serve" and e.level == "warn" then said = e.message end
    end
    assert.truthy(said and said:find("1 request waiting for its commit", 1, true), said)
    assert.truthy(said:find("left unanswered", 1, true), said)
  end)
end)
