-- A run's row held locked by another PostgreSQL session (`BEGIN; SELECT ... FOR UPDATE;` in
-- psql, left open): a repair of it gives up as it does on SQLite behind another process's write
-- lock, naming the run and the lock: a command after 5 s (exit 1), mend serve's loop after 0.1 s
-- (503) while it goes on answering other requests, a host's call after 5 s with the engine
-- whole (the batch the repair joined commits, later starts and statuses work). They waited for
-- ever. Every command runs under `timeout` so that a wait without end fails the test. Needs the
-- test cluster (MEND_TEST_PG); pending without it.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local json = require("mend").json

local q, sh = H.quote, H.shell

local it_pg = H.PG and it or pending

local PGH = require "spec.support.pg_hold"
local hold, release_all = PGH.hold, PGH.release

-- A psql session that locks run id's row (FOR UPDATE) and keeps its transaction open.
local function hold_row(dir, db, id)
  hold(dir, db, ("SELECT id FROM runs WHERE id = '%s' FOR UPDATE"):format(id))
end

-- A psql session that holds dead letter id's dlq row, waits for mend's session to wait for a
-- lock (its delete of that row), then asks for the run's row, which mend's look holds: the
-- server ends one of the two transactions after deadlock_timeout, here mend's (the later
-- waiter is the one checked).
local function deadlock_on_dlq(dir, db, id)
  hold(dir, db, ("SELECT run_id FROM dlq WHERE run_id = '%s' FOR UPDATE;\n\\! touch %%HELD%%\n"
    .. "DO $$ BEGIN WHILE NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    .. " AND application_name = 'mend') LOOP PERFORM pg_stat_clear_snapshot(); PERFORM pg_sleep(0.02);"
    .. " END LOOP; END $$;\nSELECT id FROM runs WHERE id = '%s' FOR UPDATE;"):format(id, id))
end

-- `mend ARGS --db DB` under a 40 s timeout (124: it waited that long); code, stdout, stderr
-- and the seconds it took.
local function mend_bounded(db, args)
  local t0 = H.wall()
  local rc, out, err = H.mend_in(nil, db, args)
  return rc, out, err, H.wall() - t0
end

local function gives_up(id, rc, out, err, took)
  assert.are_not.equal(124, rc, "it waited for the lock without end")
  assert.are.equal(1, rc, out .. err)
  assert.matches("run " .. id .. " is locked by another session %(waited 5%.0 s%)", err)
  assert.is_true(took < 30, "took " .. took)
end

describe("a run's row locked by another PostgreSQL session", function()
  local bound, unbound = PGH.bound_mend(40)
  setup(bound)
  teardown(unbound)
  after_each(PGH.clean_up)

  it_pg("mend cancel gives up naming the run and the lock, and the run is as it was", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local before = H.status_json(db, id)
    hold_row(dir, db, id)
    local took
    rc, out, err, took = mend_bounded(db, "cancel " .. id)
    gives_up(id, rc, out, err, took)
    release_all()
    local st = H.status_json(db, id)
    assert.are.equal("running", st.status)
    assert.are.same(before.steps, st.steps)
    -- a signal takes no lock on the run's row: it answers while the row is held
    hold_row(dir, db, id)
    rc, out, err = H.mend_in(nil, db, "signal " .. id .. " payment --data '{\"amount\":5}'")
    assert.are.equal(0, rc, out .. err)
  end)

  -- A run of workflows/approval.lua waiting on its token, its row held by psql: its id and token.
  local function token_waits_row_held()
    local dir = H.tmp_dir()
    H.write_file(dir, "approval.lua", H.slurp("workflows/approval.lua"))
    local db, log = H.new_db(dir, "a.db"), dir .. "/worker.log"
    local rc, out = H.mend_in(nil, db, "start approval --workflows " .. q(dir)
      .. [[ --input '{"order":"o-1","amount":25}']])
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = H.spawn_worker(db, dir, log)
    local token
    H.wait_for("the token", function()
      token = H.read(log):match("mtk_%x+")
      return token ~= nil
    end, 10)
    H.stop_worker(pid)
    hold_row(dir, db, id)
    return db, id, token
  end

  it_pg("mend complete and mend fail answer while the run's row is held: a token takes no lock on it", function()
    local db, id, token = token_waits_row_held()
    local rc, out, err = mend_bounded(db, "complete " .. token .. " --result '{\"by\":\"alice\"}'")
    assert.are.equal(0, rc, out .. err)
    assert.matches("token completed: run " .. id, out)
    release_all()
    db, id, token = token_waits_row_held()
    rc, out, err = mend_bounded(db, "fail " .. token .. " --kind fatal --message no")
    assert.are_not.equal(124, rc, "it waited for the lock without end")
    assert.are.equal(0, rc, out .. err)
  end)

  it_pg("mend dlq retry and mend dlq resolve give up naming the run, and the dead letter stays", function()
    local dir, db = S.workspace()
    local id = S.dead_letter(dir, db)
    hold_row(dir, db, id)
    gives_up(id, mend_bounded(db, "dlq retry " .. id))
    gives_up(id, mend_bounded(db, "dlq resolve " .. id .. " --note 'refunded by hand'"))
    release_all()
    assert.are.equal("needs_attention", H.status_json(db, id).status)
    local rc, out, err = H.mend_in(nil, db, "dlq resolve " .. id .. " --note 'refunded by hand'")
    assert.are.equal(0, rc, out .. err)
  end)

  it_pg("mend serve answers a cancel 503 at once, and other requests meanwhile", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local dead = S.dead_letter(dir, db)
    local base = S.start(dir, db)
    hold_row(dir, db, id)
    hold_row(dir, db, dead)
    local cancel = S.post_later(dir, base, "/api/v1/runs/" .. id .. "/cancel", {}, "cancel")
    local resolve = S.post_later(dir, base, "/api/v1/dlq/" .. dead .. "/resolve", { note = "x" }, "resolve")
    local started = S.post_later(dir, base, "/api/v1/runs", { workflow = "hello", input = { to = "a" } }, "start")
    local code, body, took = started()
    assert.are.equal(201, code, json.encode(body))
    assert.is_true(took < 5, "the start waited " .. took .. " s")
    for _, answer in ipairs({ cancel, resolve }) do
      code, body = answer()
      assert.are.equal(503, code, json.encode(body))
      assert.are.equal("busy", body.error.code, json.encode(body))   -- send it again
      assert.matches("is locked by another session", body.error.message)
    end
    release_all()
    code = S.post(base, "/api/v1/runs/" .. id .. "/cancel", {})
    assert.is_truthy(code == 200 or code == 202, code)
  end)

  it_pg("a host's cancel gives up and its engine goes on: the batch it joined commits", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    hold_row(dir, db, id)
    local script = H.write_file(dir, "host.lua", [==[
      local mend = require "mend"
      local eng = mend.engine{ db = arg[1] }
      eng:load(arg[2] .. "/wait.lua")
      eng:load(arg[2] .. "/hello.lua")
      local first = eng:start("wait", {})
      local ok, err = pcall(eng.cancel, eng, arg[3])
      print("cancel", ok, err)
      local second = eng:start("hello", { to = "b" })
      print("status", eng:status(first).status, eng:status(second).status)
      print("ids", first, second)
    ]==])
    local t0 = H.wall()
    rc, out = sh(("timeout 40 lua5.4 %s %s %s %s 2>&1"):format(q(script), q(db), q(dir), id))
    assert.are_not.equal(124, rc, "it waited for the lock without end: " .. out)
    assert.are.equal(0, rc, out)
    assert.is_true(H.wall() - t0 < 30)
    assert.matches("cancel\tfalse\t[^\n]*run " .. id .. " is locked by another session", out)
    assert.matches("status\trunning\t%a+", out)
    local first, second = out:match("ids\t(%S+)\t(%S+)")
    release_all()
    assert.are.equal("running", H.status_json(db, first).status)
    assert.is_truthy(H.status_json(db, second).status)
    assert.are.equal("running", H.status_json(db, id).status)
    -- the session kept no lock_timeout: nothing else of the engine gave up
    assert.is_falsy(out:find("lock timeout"), out)
  end)

  -- A host's look at run X waits for psql, which holds X and then waits for the host's lease
  -- row (the host's transaction updated it as it began): the look is picked to end the
  -- deadlock. Refused naming it; and the host, which does not turn its loop for 4 s after,
  -- does not keep psql waiting until it does (its batch's earlier writes are committed at once).
  -- psql asks for the lease row once the host waits for X (sooner, the row is not the host's
  -- yet), and half of deadlock_timeout after: the host, the first to wait, is the first the
  -- server checks, and finds the cycle whole (a check finding none is not made again).
  it_pg("a host's look picked to end a deadlock is refused so, and the other session goes on", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local ownerf, go = dir .. "/owner", dir .. "/go"
    local script = H.write_file(dir, "host.lua", [==[
      local mend = require "mend"
      local eng = mend.engine{ db = arg[1] }
      eng:load(arg[2] .. "/wait.lua")
      eng:load(arg[2] .. "/hello.lua")
      local first = eng:start("wait", {})
      local f = io.open(arg[4], "w"); f:write(eng:status(first).owner or "?"); f:close()
      while not io.open(arg[5]) do os.execute("sleep 0.05") end
      local ok, e = pcall(eng.cancel, eng, arg[3])
      print("cancel", ok, e)
      io.stdout:flush()
      -- the loop does not turn until psql has ended (the test says so), or for 20 s: psql held
      -- by this host's idle transaction ends only after it
      local clock = require("system").gettime
      local bound = clock() + 20
      while not io.open(arg[6]) and clock() < bound do os.execute("sleep 0.05") end
      print("turned", string.format("%.3f", clock()))
      print("second", eng:start("hello", { to = "b" }))
    ]==])
    local psql_ended = dir .. "/psql-ended"
    sh(("timeout 60 lua5.4 %s %s %s %s %s %s %s >%s 2>&1 &"):format(q(script), q(db), q(dir), id,
      q(ownerf), q(go), q(psql_ended), q(dir .. "/host.out")))
    H.wait_for("the host's owner", function() return (H.read(ownerf) or "") ~= "" end, 20)
    local owner = H.read(ownerf)
    local name = "mend-hold-dl-" .. dir:match("([%w_]+)$")
    PGH.adopt(name)
    local sql = H.write_file(dir, name .. ".sql", ("BEGIN;\nSELECT id FROM runs WHERE id = '%s' FOR UPDATE;\n"
      .. "\\! touch %s\n"
      .. "DO $$ BEGIN WHILE NOT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted"
      .. " AND pg_backend_pid() = ANY (pg_blocking_pids(pid))) LOOP PERFORM pg_sleep(0.02);"
      .. " END LOOP; END $$;\nSELECT pg_sleep(0.5);\n"
      .. "UPDATE workers SET lease_until = lease_until WHERE owner = '%s';\nCOMMIT;\n"):format(id, go, owner))
    local t0 = H.wall()
    sh(("PGAPPNAME=%s timeout 40 psql -X -q -A -t %s -f %s >/dev/null 2>&1"):format(q(name), q(db), q(sql)))
    local ended = H.wall()
    assert(io.open(psql_ended, "w")):close()
    H.wait_for("the host to end", function() return (H.read(dir .. "/host.out") or ""):find("second") end, 30)
    local hout = H.read(dir .. "/host.out")
    assert.matches("cancel\tfalse\t[^\n]*deadlock", hout)
    -- psql ended before the host's loop turned again, which the host's idle transaction would
    -- have held it to
    local turned = tonumber(hout:match("turned\t(%S+)"))
    assert.is_true(ended < turned, ("psql was kept waiting by the host's idle transaction until"
      .. " its loop turned (%.1f s in all)"):format(ended - t0))
  end)
  -- The repair's writes after its look were sent by a read's flush before its commit; the
  -- server ended that transaction (a deadlock's victim), and the commit that followed held
  -- nothing: `mend dlq resolve` printed "resolved", exit 0, and serve answered 200, with the run
  -- still a dead letter.
  it_pg("a resolve whose writes a deadlock ended says so, from the CLI and from serve", function()
    local dir, db = S.workspace()
    local id = S.dead_letter(dir, db)
    deadlock_on_dlq(dir, db, id)
    local rc, out, err = mend_bounded(db, "dlq resolve " .. id .. " --note x")
    release_all()
    assert.are.equal(1, rc, out .. err)
    assert.matches("the database ended this repair's transaction before it was committed %(.*"
                   .. "deadlock detected.*%): nothing of it was written; try again", err)
    assert.are.equal("needs_attention", H.status_json(db, id).status)
    local base = S.start(dir, db)
    deadlock_on_dlq(dir, db, id)
    -- serve's loop waits 0.1 s at a time: which session the server picks, or whether the loop
    -- gave up first, is the timing's; what is answered must be what was written
    local code, body = S.post(base, "/api/v1/dlq/" .. id .. "/resolve", { note = "x" })
    release_all()
    if code ~= 200 then
      assert.are.equal(503, code, json.encode(body or {}))
      assert.are.equal("needs_attention", H.status_json(db, id).status)
      -- and the engine goes on: the same resolve, unhindered, is made
      code, body = S.post(base, "/api/v1/dlq/" .. id .. "/resolve", { note = "y" })
      assert.are.equal(200, code, json.encode(body or {}))
    end
    assert.are.equal("resolved", H.status_json(db, id).status)
  end)
  -- A write after the look that waits past the bound ended the engine of a host: every later
  -- call failed with the lock's message. The repair fails; the engine goes on.
  it_pg("a host's resolve whose write waits past the bound fails, and its engine goes on", function()
    local dir, db = S.workspace()
    local id = S.dead_letter(dir, db)
    hold(dir, db, ("SELECT run_id FROM dlq WHERE run_id = '%s' FOR UPDATE"):format(id))
    local script = H.write_file(dir, "host.lua", [==[
      local mend = require "mend"
      local eng = mend.engine{ db = arg[1] }
      eng:load(arg[2] .. "/hello.lua")
      local ok, err = pcall(eng.resolve, eng, arg[3], { note = "x" })
      print("resolve", ok, err)
      local ok2, second = pcall(eng.start, eng, "hello", { to = "b" })
      print("start", ok2, second)
      if ok2 then eng:run(); print("status", eng:status(second).status) end
    ]==])
    local rc, out = sh(("timeout 40 lua5.4 %s %s %s %s 2>&1"):format(q(script), q(db), q(dir), id))
    release_all()
    assert.are_not.equal(124, rc, out)
    assert.matches("resolve\tfalse\tresolve: the database ended this repair's transaction before it"
                   .. " was committed %(.*a row of table dlq is locked by another session", out)
    assert.matches("start\ttrue", out)
    assert.matches("status\tsucceeded", out)
    assert.are.equal("needs_attention", H.status_json(db, id).status)
  end)
end)
