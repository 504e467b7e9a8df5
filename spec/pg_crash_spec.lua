-- The crash harness on PostgreSQL (issue 20): several real `mend worker` processes on the test
-- cluster over TCP to loopback, killed with SIGKILL at random and at the failpoints, stopped
-- with SIGSTOP past their lease, their sessions ended with pg_terminate_backend (from psql,
-- and from inside a batch: MEND_PG_END_SESSION), the postmaster itself killed with SIGKILL and
-- started again (tests/pg/cluster.sh kill9: crash recovery), and workers whose clocks are
-- minutes apart from each other and from the server's (libfaketime). The audit is SQLite's (spec/support/crash_harness.lua): every
-- acknowledged run ends, every effect once per key, no compensation of a step never recorded
-- succeeded, reverse order, no run written by a worker that does not hold it.
--
-- Needs the test cluster and its state directory (tests/pg/cluster.sh run); pending without.
-- MEND_PG_CRASH_CYCLES sets the number of kill cycles (default 120; `make crash-soak` runs
-- PG_CYCLES, 1000: a cycle costs about twice SQLite's), MEND_CRASH_SEED the random seed.
local H = require "spec.helper"
local mend = require "mend"
local C = require "spec.support.crash_harness"

local CYCLES = tonumber(os.getenv("MEND_PG_CRASH_CYCLES") or "120")
local SEED = tonumber(os.getenv("MEND_CRASH_SEED") or "7")
local STATE = os.getenv("MEND_TEST_PG_STATE")
local FAILPOINTS = { "before_commit", "after_commit", "execute", "compensate" }
local it_pg = H.PG and STATE and it or pending

local sleep, alive, kill9 = C.sleep, C.alive, C.kill9

-- The workers' sessions carry a name of their own, so that psql can end them all.
local function named(db, app) return db .. "&application_name=" .. app end

-- Ends every session named `app`; returns how many there were. A session that ended on its
-- own meanwhile gets a warning ("not a PostgreSQL backend process") before the count.
local function terminate(app)
  local lines = H.sql(H.PG, ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    .. " WHERE application_name = '%s' AND pid <> pg_backend_pid()"):format(app))
  return assert(tonumber(lines[#lines]), table.concat(lines, "\n"))
end

local function cluster(verb)
  local rc, out = H.shell("sh tests/pg/cluster.sh " .. verb .. " " .. H.quote(STATE))
  assert.are.equal(0, rc, out)
end

-- A client engine with the saga loaded: a new one after the server crashed under the last.
local function client_on(db)
  local client = H.new_engine({ db = db, clock = "real" })
  client:load("spec/support/crash/saga.lua")
  return client
end

-- libfaketime, from Debian's package faketime (libfaketime): its path is multiarch.
local function libfaketime()
  local p = assert(io.popen("ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null"))
  local path = p:read("l")
  p:close()
  assert(path, "libfaketime not found (Debian package faketime, in the Makefile's DEB_PACKAGES)")
  return path
end

-- libfaketime makes a semaphore and a segment in /dev/shm, named by the process's pid, in every
-- process that cannot open those its environment names (the first one, or one of the postgres
-- user's under root's), owned by its user and never removed, not even on a normal exit. When the pid comes round again for the
-- other user, sem_open fails with "Permission denied" and the process cannot start (seen once:
-- the skewed server's test timed out). Those of processes gone are removed before each start.
local function tidy_faketime_shm()
  local p = io.popen("ls /dev/shm 2>/dev/null")
  if not p then return end
  for name in p:lines() do
    local pid = name:match("^sem%.faketime_sem_(%d+)$") or name:match("^faketime_shm_(%d+)$")
    if pid then
      local alive = io.open("/proc/" .. pid .. "/stat")
      if alive then alive:close() else os.remove("/dev/shm/" .. name) end
    end
  end
  p:close()
end

-- The environment of a worker whose clock is `secs` seconds off. ASan's runtime, when the
-- specs preload it, must stay first.
local function skewed(secs)
  tidy_faketime_shm()
  return string.format('LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }%s" FAKETIME="%+d"', libfaketime(), secs)
end

local function count_in(log, text)
  local _, n = H.read(log):gsub(text, "")
  return n
end

describe("workers on PostgreSQL killed, stopped and cut off from a crashing server", function()
  after_each(H.cleanup)

  it_pg("finish every run and apply every effect once, across " .. CYCLES .. " kill cycles", function()
    local db = H.new_db()
    local app = "mend_crash_" .. db:match("search_path%%3D([%w_]+)")
    local wdb = named(db, app)
    local _, dir, log, client, ids = C.new_setup(0, false, db)
    math.randomseed(SEED)
    local n, t0 = 0, H.wall()
    local kills = { random = 0, stopped = 0, terminated = 0, end_session = 0, postmaster = 0 }
    local function submit()
      for _ = 1, 2 do n = n + 1; ids[#ids + 1] = C.submit(client, dir, n) end
    end
    local workers = {}
    -- each holds 8 runs at most: the runs are spread over them, and change hands at each kill
    local function start_worker(env) return C.start_worker(wdb, env, log, "--max-in-flight 8") end
    for i = 1, 3 do workers[i] = start_worker() end
    -- Worker i is killed and a new one takes its place: dying at `point` (its nth time
    -- there), or ending its session in its nth batch, or killed after a moment.
    -- A worker that outlived the wait for its failpoint may die there later: counted then.
    local armed = {}
    local function died(i)
      if armed[i] and not alive(workers[i]) then kills[armed[i]] = (kills[armed[i]] or 0) + 1 end
      armed[i] = nil
    end
    local function cycle(i, point, nth, wait)
      submit()
      died(i)
      kill9(workers[i])
      local env
      if point == "end_session" then env = "MEND_PG_END_SESSION=" .. nth
      elseif point then env = string.format("MEND_FAILPOINT=%s:%d", point, nth) end
      workers[i] = start_worker(env)
      if point and point ~= "end_session" then
        armed[i] = point
        local until_t = H.wall() + wait
        while alive(workers[i]) and H.wall() < until_t do sleep(0.005) end
        if not alive(workers[i]) then
          died(i)
          workers[i] = start_worker()
        end
      else
        if point then kills.end_session = kills.end_session + 1 end
        sleep(math.random() * 0.08)
        kills.random = kills.random + 1
      end
    end
    for c = 1, CYCLES do
      local i = c % #workers + 1
      if c % 3 == 0 then
        cycle(i, FAILPOINTS[(c // 3) % #FAILPOINTS + 1], math.random(1, 6), 0.3)
      elseif c % 7 == 1 then
        cycle(i, "end_session", math.random(1, 6))
      else
        cycle(i)
      end
      if c % 10 == 5 then
        -- every session of the workers ended, from psql, while they work
        kills.terminated = kills.terminated + terminate(app)
      end
      if c % 15 == 8 then
        -- one frozen past its 0.5 s lease with runs in hand (a burst of them; stopped again
        -- until one is caught holding some): the others take them, and it must write none
        for _ = 1, 5 do submit() end
        local frozen
        for _ = 1, 30 do
          for _, o in ipairs(H.sql(db, "SELECT owner FROM runs WHERE owner IS NOT NULL AND"
              .. " status IN ('running', 'compensating')")) do
            local pid = tonumber(o:match(":(%d+):"))
            for _, w in ipairs(workers) do
              if w == pid and alive(w) then frozen = w end
            end
          end
          if frozen then
            C.sh("kill -STOP " .. frozen)
            local held = ("SELECT count(*) FROM runs WHERE owner LIKE '%%:%d:%%' AND status IN"
              .. " ('running', 'compensating')"):format(frozen)
            if tonumber(H.sql(db, held)[1]) > 0 then break end
            C.sh("kill -CONT " .. frozen)
            frozen = nil
          end
          submit()
          sleep(0.01)
        end
        if frozen then
          sleep(0.8)
          C.sh("kill -CONT " .. frozen)
          kills.stopped = kills.stopped + 1
        end
      end
      if c % 50 == 25 then   -- 2 in make test, 20 in a soak of 1000
        cluster("kill9")
        kills.postmaster = kills.postmaster + 1
        H.close(client)
        client = client_on(db)
      end
    end
    -- A slow build may not reach a failpoint in time: such a point gets more cycles, with
    -- more time, until a worker dies there.
    for _, point in ipairs(FAILPOINTS) do
      for k = 1, 10 do
        if (kills[point] or 0) > 0 then break end
        cycle(k % #workers + 1, point, 1, 3)
      end
    end
    for i = 1, #workers do died(i); kill9(workers[i]) end
    local t_settle = H.wall()
    local left = C.settle(db, client, ids, log)
    assert(left == 0, left .. " runs unfinished; seed " .. SEED .. "\n" .. H.read(log):sub(-3000))
    t_settle = H.wall() - t_settle
    local ok, counts = pcall(C.audit, db, client, ids, dir)
    if not ok then
      print(string.format("\n  the audit failed: MEND_CRASH_SEED=%d MEND_CRASH_CYCLES=%d", SEED, CYCLES))
      error(counts, 0)
    end
    local lost = count_in(log, "not known to be committed")
    local let_go = count_in(log, "stalled past its lease")
    print(string.format("\n  %d runs, %d cycles in %.1fs, settled in %.1fs: %s; kills %s;"
      .. " %d batches lost with their connection, %d runs let go by a worker woken past its lease",
      #ids, CYCLES, H.wall() - t0, t_settle, mend.json.encode(counts), mend.json.encode(kills),
      lost, let_go))
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
    for _, point in ipairs(FAILPOINTS) do
      assert.is_truthy((kills[point] or 0) > 0, "no kill at failpoint " .. point)
    end
    assert.is_truthy(kills.terminated > 0, "no session ended from psql")
    assert.is_truthy(lost > 0, "no worker saw its connection lost")
    assert.is_truthy(let_go > 0, "no stopped worker found its runs taken")
  end)
end)

describe("workers on PostgreSQL with a backlog, killed while they commit", function()
  after_each(H.cleanup)

  -- Hundreds of runs ready at once: large batches in the air when the kills land (at random,
  -- at the commit failpoints, and the postmaster's own).
  it_pg("lose nothing and apply every effect once, the server killed under them too", function()
    local db = H.new_db()
    local _, dir, log, client, ids = C.new_setup(0, true, db)
    for n = 1, 500 do ids[#ids + 1] = C.submit(client, dir, n, true) end
    math.randomseed(SEED + 1)
    local points = { "before_commit", "after_commit" }
    for cycle = 1, 10 do
      local env
      if cycle % 2 == 0 then
        env = string.format("MEND_FAILPOINT=%s:%d", points[(cycle // 2) % 2 + 1], math.random(2, 6))
      end
      local a, b = C.start_worker(db, env, log), C.start_worker(db, nil, log)
      sleep(0.05 + math.random() * 0.15)
      if cycle == 5 then
        cluster("kill9")
        H.close(client)
        client = client_on(db)
      end
      kill9(a)
      kill9(b)
      for n = 1, 50 do ids[#ids + 1] = C.submit(client, dir, 10000 * cycle + n, true) end
    end
    assert.are.equal(0, C.settle(db, client, ids, log))
    local counts = C.audit(db, client, ids, dir)
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
  end)
end)

-- Two workers `a_env` and `b_env` whose clocks are a_secs and b_secs off this host's, on `db`,
-- whose server's clock is server_secs off it: both get runs, no run changes hands while both
-- live, every time written is the server's, and every run ends while they are killed in turn.
local function two_apart(db, a_env, a_secs, b_env, b_secs, server_secs)
  local _, dir, log, client, ids = C.new_setup(0, false, db)
  -- each holds 10 runs at most: both get some
  local function worker(env) return C.start_worker(db, env, log, "--max-in-flight 10") end
  local a, b = worker(a_env), worker(b_env)
  finally(function() kill9(a); kill9(b) end)   -- a failed check leaves neither behind
  for n = 1, 60 do ids[#ids + 1] = C.submit(client, dir, n, false, true) end
  H.wait_for("the first runs to end", function()
    for _, id in ipairs(ids) do
      if not C.finished(client:status(id).status) then return false end
    end
    return true
  end, 60)
  -- both worked, and no run changed hands while both lived
  local by = {}
  for _, id in ipairs(ids) do
    local claimed = H.events(client, id, { event = "claimed" })
    local recovered = H.events(client, id, { event = "recovered" })
    local taken = #claimed + #recovered
    assert.are.equal(1, taken, "run " .. id .. " taken " .. taken .. " times")
    assert.are.equal(1, #claimed, "run " .. id .. " not claimed first")
    by[claimed[1].worker] = (by[claimed[1].worker] or 0) + 1
  end
  local holders = 0
  for _ in pairs(by) do holders = holders + 1 end
  assert.are.equal(2, holders, "runs held by " .. mend.json.encode(by))
  -- the skew is real: a process started as they are reads its clock minutes off
  for secs, env in pairs({ [a_secs] = a_env, [b_secs] = b_env }) do
    local _, out = H.shell(env .. " date +%s")
    local skew = tonumber(out:match("%d+")) - os.time()
    assert.is_truthy(math.abs(skew - secs) < 10, ("faketime %+d gave a clock %+d s off"):format(secs, skew))
  end
  -- and yet what they write is on the server's clock
  local wall = os.time() + server_secs
  for line in H.read(log):gmatch("[^\n]+") do
    local at = tonumber(line:match('"time":(%d+%.?%d*)') or "")
    if at then
      assert.is_truthy(math.abs(at - wall) < 20, "a worker wrote a time " .. (at - wall)
        .. " s from the server's: " .. line)
    end
  end
  -- then killed in turn, each taking over what the other held
  math.randomseed(SEED)
  local n = 1000
  for round = 1, math.max(20, CYCLES // 6) do
    for _ = 1, 3 do n = n + 1; ids[#ids + 1] = C.submit(client, dir, n, false, true) end
    sleep(0.02 + math.random() * 0.08)
    if round % 2 == 0 then kill9(a); a = worker(a_env)
    else kill9(b); b = worker(b_env) end
  end
  kill9(a)
  kill9(b)
  assert.are.equal(0, C.settle(db, client, ids, log, b_env))
  local counts = C.audit(db, client, ids, dir, { skewed = true })
  assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
end

describe("two workers on PostgreSQL whose clocks are minutes apart", function()
  after_each(H.cleanup)

  -- Leases are on the server's clock: of two workers three minutes apart, the one ahead does
  -- not see the other's leases run out, nor the one behind its own last; and each takes the
  -- server's clock for the times it writes (src/store/pg/pg.c, take_server_clock).
  --
  -- Both clocks are ahead of the server's (1 and 4 minutes): libfaketime hands the absolute
  -- time of timer_settime to the kernel as it is, so in a worker whose clock runs behind, the
  -- watchdog of workflow calls (src/guard.c: a POSIX timer at a CLOCK_REALTIME deadline) would
  -- fire at once, again and again, and the worker would do nothing else. Ahead, it fires late,
  -- and no step here runs into a deadline. Workers behind the server: the server's clock is
  -- moved instead (below).
  it_pg("take no run from each other while both live, and finish every run while killed", function()
    two_apart(H.new_db(), skewed(240), 240, skewed(60), 60, 0)
  end)
end)

-- A run of retry_once on `db` whose first attempt (and retry) worker `first_env` ran, killed
-- once the retry is written: the worker `then_env` (nil: this host's clock) that takes it over
-- retries it when it is due on the server's clock.
local function retry_taken_over(db, first_env, then_env)
  local dir = H.tmp_dir()
  H.write_file(dir, "retry_once.lua", [[
local mend = require "mend"
return { name = "retry_once", retry = { initial = 1, max_delay = 1, jitter = 0 },
  steps = { { name = "a", execute = function(ctx)
    if ctx.attempt == 1 then error(mend.retryable("once")) end
    return ctx.attempt
  end } } }
]])
  local function worker(env)
    local p = assert(io.popen(("%s sh -c 'exec %s worker --db %s --workflows %s --lease 0.5"
      .. " --poll 0.01 >>%s/worker.log 2>&1' & echo $!"):format(env or "", H.MEND,
      H.quote(db):gsub("'", "'\\''"), dir, dir)))
    local pid = assert(tonumber(p:read("l")))
    p:close()
    return pid
  end
  local rc, out = H.shell(("%s start retry_once --workflows %s --db %s"):format(H.MEND,
    H.quote(dir), H.quote(db)))
  assert.are.equal(0, rc, out)
  local id = out:match("(%S+)")
  local step = ("SELECT status FROM steps WHERE run_id = '%s' AND name = 'a'"):format(id)
  local first = worker(first_env)
  local failed, ferr = pcall(H.wait_for, "the first attempt to fail",
    function() return H.sql(db, step)[1] == "retry_wait" end, 30)
  kill9(first)
  assert(failed, tostring(ferr) .. "\n" .. H.read(dir .. "/worker.log"))
  local second = worker(then_env)
  local ok, err = pcall(H.wait_for, "the retry", function()
    return H.sql(db, ("SELECT status FROM runs WHERE id = '%s'"):format(id))[1] == "succeeded"
  end, 30)
  C.stop(second)
  assert(ok, tostring(err) .. "\n" .. H.read(dir .. "/worker.log"))
end

describe("a run whose retry a worker minutes ahead wrote", function()
  after_each(H.cleanup)

  -- Due times are on the server's clock (README, "Many machines"): the worker ahead wrote the
  -- retry's due time as the server's, so the worker whose clock is right that takes the run over
  -- does not wait the four minutes the first was ahead.
  it_pg("is retried when it is due on the server's clock, by the worker that takes it over", function()
    retry_taken_over(H.new_db(), skewed(240), nil)
  end)
end)

describe("workers whose clocks are behind the PostgreSQL server's", function()
  -- A server of its own whose clock is four minutes ahead of this host's (libfaketime preloaded
  -- into the postmaster and so into every backend): workers on this host's clock are four
  -- minutes behind it, one started with a clock three minutes ahead of the host's is one minute
  -- behind. This is the case the test above cannot make (see its note on timer_settime): the
  -- workers' own timers run on their true clocks here.
  local state, serial = nil, 0
  local AHEAD = 240

  local function db_on_skewed_server()
    if not state then
      state = os.tmpname()   -- not H.tmp_dir(): the cluster outlives a test
      os.remove(state)
      local rc, out = H.shell(skewed(AHEAD) .. " sh tests/pg/cluster.sh start " .. H.quote(state))
      assert.are.equal(0, rc, out)
    end
    local uri = H.read(state .. "/uri"):match("%S+")
    serial = serial + 1
    local schema = "behind_" .. serial
    local rc, out = H.shell("psql -X -q -v ON_ERROR_STOP=1 " .. H.quote(uri) .. " -c "
      .. H.quote("CREATE SCHEMA " .. schema))
    assert.are.equal(0, rc, out)
    return uri .. "?options=-csearch_path%3D" .. schema
  end

  teardown(function()
    if state then
      H.shell("sh tests/pg/cluster.sh stop " .. H.quote(state))
      H.shell("rm -rf " .. H.quote(state))
    end
  end)
  after_each(H.cleanup)

  it_pg("take no run from each other while both live, and finish every run while killed", function()
    local db = db_on_skewed_server()
    -- the server's clock is really ahead
    local lines = H.sql(db, "SELECT extract(epoch FROM now())::bigint")
    local ahead = tonumber(lines[#lines]) - os.time()
    assert.is_truthy(math.abs(ahead - AHEAD) < 10, "the server's clock is " .. ahead .. " s ahead")
    two_apart(db, "", 0, skewed(180), 180, AHEAD)
  end)

  -- the first worker one minute behind the server, the one that takes the run over four
  it_pg("retry a run when it is due on the server's clock, after one took it over", function()
    retry_taken_over(db_on_skewed_server(), skewed(180), nil)
  end)
end)

describe("runs on PostgreSQL waiting for tokens and child runs while workers are killed", function()
  after_each(H.cleanup)

  -- spec/crash_spec.lua's test of crash_handoff (tokens answered by the harness, some twice
  -- and some stale, a child run compensated with its parent), with two workers at a time and
  -- the postmaster killed once under them.
  it_pg("take one answer an attempt, start each child once and compensate it with its parent",
        function()
    local db = H.new_db()
    local _, dir, log, client = C.new_setup(0, false, db)
    client:load("spec/support/crash/handoff.lua")
    local w = C.handoff(client, dir, db)
    local t0 = H.wall()
    math.randomseed(SEED + 2)
    local ROUNDS = math.max(16, CYCLES // 8)
    for cycle = 1, ROUNDS do
      for _ = 1, 3 do w:start(#w.ids + 1) end
      local env = cycle % 3 == 0 and string.format("MEND_FAILPOINT=%s:%d",
        FAILPOINTS[(cycle // 3) % #FAILPOINTS + 1], math.random(1, 4))
      local a = C.start_worker(db, env or nil, log, "--park-after 0.02")
      local b = C.start_worker(db, nil, log, "--park-after 0.02")
      for _ = 1, 4 do
        sleep(0.01 + math.random() * 0.04)
        w:pump()
      end
      if cycle == ROUNDS // 2 then
        cluster("kill9")
        H.close(client)
        client = client_on(db)
        client:load("spec/support/crash/handoff.lua")
        w.client = client
      end
      kill9(a)
      kill9(b)
      w:pump()   -- answered while no worker runs
    end
    local t_settle = H.wall()
    assert.are.equal(0, C.settle(db, client, w.ids, log, nil, function() w:pump() end))
    t_settle = H.wall() - t_settle
    local counts = w:audit()
    print(string.format("\n  %d runs in %.1fs, settled in %.1fs: %s; %d answers refused, %d unsure",
      #w.ids, H.wall() - t0, t_settle, mend.json.encode(counts), w.refused, w.unsure))
    assert.is_truthy((counts.succeeded or 0) > 0 and (counts.compensated or 0) > 0)
    assert.is_truthy(counts.children > 0 and w.refused > 0)
  end)
end)
