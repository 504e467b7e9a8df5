-- A worker on PostgreSQL whose connection is lost (issue 20): the server ends its session in
-- the middle of a batch (the failpoint MEND_PG_END_SESSION, which sends
-- pg_terminate_backend(pg_backend_pid()) after a batch's writes and before its COMMIT), or an
-- operator ends every session of the worker with pg_terminate_backend from psql. The worker
-- logs a clear error for the batch that failed, acts on nothing of it (each step's effect
-- comes after the one before it was committed: the write-ahead rule), reconnects, reads its
-- runs again from the server and goes on: every run ends, and runs started later too. The
-- same when the server restarts (tests/pg/cluster.sh restart).
-- Needs the test cluster (MEND_TEST_PG); pending without it.

local H = require "spec.helper"

local MEND, q = H.MEND, H.quote

local function mend_cmd(db, args)
  return H.shell(("%s %s --db %s"):format(MEND, args, q(db)))
end

local function worker(db, dir, log, env)
  local inner = ("exec %s worker --db %s --workflows %s --poll 0.1 2>>%s"):format(MEND, q(db), q(dir), q(log))
  local p = io.popen(("%s sh -c %s >/dev/null & echo $!"):format(env or "", q(inner)))
  local pid = p:read("l")
  p:close()
  return pid
end

-- kill -0 would find a worker that died still there, as a zombie until init reaps it
local alive = H.alive

-- A step's effect in a workflow's text: "<run> <step>" appended to a file (%q: its path).
local EFFECT = [[
local function effect(ctx, name)
  local f = assert(io.open(%q, "a"))
  f:write(ctx.run_id, " ", name, "\n")
  f:close()
  return name
end
]]

-- Three steps, each appending "<run> <step>" to a file before it returns.
local function workflow(dir)
  H.write_file(dir, "three.lua", (EFFECT .. [[
return { name = "three", steps = {
  { name = "a", execute = function(ctx) return effect(ctx, "a") end },
  { name = "b", execute = function(ctx) return effect(ctx, "b") end },
  { name = "c", execute = function(ctx) return effect(ctx, "c") end } } }
]]):format(dir .. "/effects"))
end

-- A directory with the workflow, a fresh database and the worker's log file in it.
local function fresh()
  local dir = H.tmp_dir()
  workflow(dir)
  return dir, H.new_db(), dir .. "/worker.log"
end

local function start(db, dir, n)
  local ids = {}
  for i = 1, n do
    local rc, out = mend_cmd(db, "start three --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    ids[i] = out:match("(%S+)")
  end
  return ids
end

local function all_succeeded(db, ids)
  for _, id in ipairs(ids) do
    local st = H.sql(db, ("SELECT status FROM runs WHERE id = '%s'"):format(id))[1]
    if st ~= "succeeded" then return false end
  end
  return true
end

-- Per run, every effect of a step comes before any of the next: a step ran only once the
-- success of the one before it was committed (a step may run again after a lost batch).
local function assert_in_order(dir, ids)
  local order = { a = 1, b = 2, c = 3 }
  local last, seen = {}, {}
  for line in io.lines(dir .. "/effects") do
    local id, step = line:match("^(%S+) (%S+)$")
    assert.is_true((last[id] or 0) <= order[step], "run " .. id .. ": " .. step .. " ran again after a later step")
    last[id] = order[step]
    seen[id .. step] = true
  end
  for _, id in ipairs(ids) do
    for step in pairs(order) do assert.is_true(seen[id .. step], id .. " " .. step .. " never ran") end
  end
end

describe("a worker on PostgreSQL that loses its connection", function()
  after_each(H.cleanup)
  local it_pg = H.PG and it or pending

  -- Runs through a worker that meets the failpoint in env: four runs, then two more started
  -- after, all of which must end with the worker alive. Gives the error lines of its log, and
  -- the runs in the order started.
  local function through_failpoint(env)
    local dir, db, log = fresh()
    local ids = start(db, dir, 4)
    local pid = worker(db, dir, log, env)
    local ok, err = pcall(function()
      H.wait_for("the runs to end", function() return all_succeeded(db, ids) end, 60)
      assert.is_true(alive(pid), "the worker stopped")
      local later = start(db, dir, 2)
      H.wait_for("the runs started later to end", function() return all_succeeded(db, later) end, 60)
      for _, id in ipairs(later) do ids[#ids + 1] = id end
      assert.is_true(alive(pid), "the worker stopped")
    end)
    H.stop_worker(pid)
    local text = H.read(log)
    assert(ok, tostring(err) .. "\n" .. text)
    local errors = {}
    for line in text:gmatch("[^\n]+") do
      if line:find('"level":"error"', 1, true) then errors[#errors + 1] = line end
    end
    assert.are.equal(1, #errors, text)
    return errors, dir, ids
  end

  it_pg("mid-batch: logs the failed batch, acts on nothing of it, reconnects and goes on", function()
    -- the error, once, naming the server and what happened; and nothing broke down
    local errors, dir, ids = through_failpoint("MEND_PG_END_SESSION=3")
    assert.matches('"event":"store"', errors[1])
    assert.matches("127%.0%.0%.1:%d+/mend: .*terminating connection", errors[1])
    assert.matches("not known to be committed", errors[1])
    assert_in_order(dir, ids)
  end)

  -- A batch the server rolls back to end a deadlock (MEND_PG_DEADLOCK: SQLSTATE 40P01 before
  -- the COMMIT of its 3rd batch; test_pg_store_batches's test_deadlock makes a real one) is told as a
  -- batch not committed: the worker goes on, on the same connection, and never stops.
  it_pg("a batch rolled back for a deadlock: acts on nothing of it and goes on", function()
    local errors, dir, ids = through_failpoint("MEND_PG_DEADLOCK=3")
    assert.matches("deadlock detected %(MEND_PG_DEADLOCK%)", errors[1])
    assert.matches("not known to be committed", errors[1])
    assert_in_order(dir, ids)
  end)

  -- The session ended right after a claim (MEND_PG_END_AFTER_CLAIM: after the worker's 2nd
  -- claim, the one that looks for more after its first took the four runs): the claim went
  -- with the transaction, so none of its runs is this worker's. It must not read them again on
  -- a new connection and run them there (another worker may take them meanwhile): a lost batch,
  -- told once, and the runs claimed anew.
  it_pg("the session ended right after a claim: runs none of that claim, claims again", function()
    local errors, dir, ids = through_failpoint("MEND_PG_END_AFTER_CLAIM=2")
    assert.matches('"event":"store"', errors[1])
    assert.matches("not known to be committed", errors[1])
    local text = H.read(dir .. "/worker.log")
    assert.is_nil(text:find("stalled past its lease", 1, true), text)
    -- nothing of it ran before the runs were claimed again: each effect once
    local count = {}
    for line in io.lines(dir .. "/effects") do count[line] = (count[line] or 0) + 1 end
    for _, id in ipairs(ids) do
      for _, step in ipairs { "a", "b", "c" } do
        assert.are.equal(1, count[id .. " " .. step], id .. " " .. step)
      end
    end
  end)

  -- A parked run brought back at its due time reads its image from the server; the session
  -- ends right then (MEND_PG_END_BEFORE_IMAGE=1: a batch open, the first image read from the
  -- server, the claim's own coming from its read-ahead). The batch went with the connection:
  -- a lost batch, told once, the runs held let go and claimed again, not the parked run given
  -- back alone on a new connection while the rest goes on as if the batch had committed.
  it_pg("a parked run's image read with the session ended: a lost batch, each effect once", function()
    local dir, db, log = fresh()
    H.write_file(dir, "napper.lua", (EFFECT .. [[
return { name = "napper", steps = {
  { name = "a", execute = function(ctx) return effect(ctx, "a") end },
  { name = "nap", sleep = 2.5 },
  { name = "b", execute = function(ctx) return effect(ctx, "b") end } } }
]]):format(dir .. "/effects"))
    local rc, out = mend_cmd(db, "start napper --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local ids = { out:match("(%S+)") }
    local pid = worker(db, dir, log, "MEND_PG_END_BEFORE_IMAGE=1")
    local ok, err = pcall(function()
      H.wait_for("the run to end", function() return all_succeeded(db, ids) end, 60)
      assert.is_true(alive(pid), "the worker stopped")
    end)
    H.stop_worker(pid)
    local text = H.read(log)
    assert(ok, tostring(err) .. "\n" .. text)
    -- the read that failed came after the run went to sleep: the one that brought it back
    local errors, slept = {}, false
    for line in text:gmatch("[^\n]+") do
      if line:find("pending -> sleeping", 1, true) then slept = true end
      if line:find('"level":"error"', 1, true) then
        assert.is_true(slept, text)
        errors[#errors + 1] = line
      end
    end
    assert.are.equal(1, #errors, text)
    assert.matches('"event":"store"', errors[1])
    assert.matches("not known to be committed", errors[1])
    local count = {}
    for line in io.lines(dir .. "/effects") do count[line] = (count[line] or 0) + 1 end
    assert.are.equal(1, count[ids[1] .. " a"], text)
    assert.are.equal(1, count[ids[1] .. " b"], text)
  end)

  -- `mend run` (a client engine, no worker) meets the same: its batch rolled back for a
  -- deadlock, or its session ended before a COMMIT. It acts on nothing of that batch, reads
  -- its run again from the server and finishes it: one error, exit 0.
  for _, env in ipairs { "MEND_PG_DEADLOCK=3", "MEND_PG_END_SESSION=3" } do
    it_pg("mend run through " .. env .. ": reads its run again and finishes it", function()
      local dir, db = fresh()
      local rc, out = H.shell(("%s %s run %s --db %s 2>&1"):format(env, MEND, q(dir .. "/three.lua"), q(db)))
      assert.are.equal(0, rc, out)
      local errors = {}
      for line in out:gmatch("[^\n]+") do
        if line:find('"level":"error"', 1, true) then errors[#errors + 1] = line end
      end
      assert.are.equal(1, #errors, out)
      assert.matches("not known to be committed", errors[1])
      local ids = H.sql(db, "SELECT id FROM runs")
      assert.are.equal(1, #ids, out)
      assert.is_true(all_succeeded(db, ids), out)
      assert_in_order(dir, ids)
    end)
  end

  it_pg("every session ended with pg_terminate_backend, again and again: every run ends", function()
    local dir, db, log = fresh()
    local app = "mend_reconnect_" .. tostring(os.time())
    local pid = worker(db .. "&application_name=" .. app, dir, log)   -- its sessions, by name
    local ids = {}
    local ok, err = pcall(function()
      for _ = 1, 4 do
        for _, id in ipairs(start(db, dir, 5)) do ids[#ids + 1] = id end
        os.execute("sleep 0.1")
        H.sql(H.PG, ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
          .. " WHERE application_name = '%s' AND pid <> pg_backend_pid()"):format(app))
      end
      H.wait_for("the runs to end", function() return all_succeeded(db, ids) end, 90)
      assert.is_true(alive(pid), "the worker stopped")
    end)
    H.stop_worker(pid)
    assert(ok, tostring(err) .. "\n" .. H.read(log))
    assert_in_order(dir, ids)
  end)

  -- The cluster's state directory comes with it (tests/pg/cluster.sh run).
  local STATE = os.getenv("MEND_TEST_PG_STATE")
  local it_restart = H.PG and STATE and it or pending

  it_restart("the server restarted under it: every run ends, and runs started after", function()
    local dir, db, log = fresh()
    local pid = worker(db, dir, log)
    local ids = start(db, dir, 5)
    local ok, err = pcall(function()
      local rc, out = H.shell("sh tests/pg/cluster.sh restart " .. q(STATE))
      assert.are.equal(0, rc, out)
      for _, id in ipairs(start(db, dir, 5)) do ids[#ids + 1] = id end
      H.wait_for("the runs to end", function() return all_succeeded(db, ids) end, 90)
      assert.is_true(alive(pid), "the worker stopped")
    end)
    H.stop_worker(pid)
    assert(ok, tostring(err) .. "\n" .. H.read(log))
    assert_in_order(dir, ids)
  end)

  -- The server away for longer than the worker's first try to reconnect (10 s).
  local function cpu_seconds(pid)
    local f = io.open("/proc/" .. pid .. "/stat")
    if not f then return nil end
    local fields = {}
    for x in f:read("a"):gsub("^.*%) ", ""):gmatch("%S+") do fields[#fields + 1] = x end
    f:close()
    return (tonumber(fields[12]) + tonumber(fields[13])) / 100   -- utime, stime: clock ticks
  end

  local function wait_for_line(log, pattern, what)
    H.wait_for(what, function() return H.read(log):find(pattern) ~= nil end, 40)
  end

  it_restart("the server down for long: the worker waits without spinning, then goes on", function()
    local dir, db, log = fresh()
    local pid = worker(db, dir, log)
    local ids = start(db, dir, 2)
    local up = true
    local ok, err = pcall(function()
      H.wait_for("the first runs to end", function() return all_succeeded(db, ids) end, 60)
      local rc, out = H.shell("sh tests/pg/cluster.sh down " .. q(STATE))
      assert.are.equal(0, rc, out)
      up = false
      wait_for_line(log, "not back yet", "the worker to give up its first try")
      -- a worker that retried in a tight loop would use about all of these 3 s of CPU
      local before = cpu_seconds(pid)
      os.execute("sleep 3")
      local used = cpu_seconds(pid) - before
      assert.is_true(used < 1, ("the worker used %.2f s of CPU in 3 s while waiting"):format(used))
      assert.is_true(alive(pid), "the worker stopped")
      rc, out = H.shell("sh tests/pg/cluster.sh up " .. q(STATE))
      assert.are.equal(0, rc, out)
      up = true
      local later = start(db, dir, 3)
      H.wait_for("the runs started after to end", function() return all_succeeded(db, later) end, 60)
      for _, id in ipairs(later) do ids[#ids + 1] = id end
    end)
    if not up then H.shell("sh tests/pg/cluster.sh up " .. q(STATE)) end
    H.stop_worker(pid)
    assert(ok, tostring(err) .. "\n" .. H.read(log))
    assert.matches("reconnected", H.read(log))
    assert_in_order(dir, ids)
  end)

  it_restart("the server down: SIGTERM stops the worker at once, with the server named", function()
    local dir, db, log = fresh()
    local status = dir .. "/status"
    local inner = ("%s worker --db %s --workflows %s --poll 0.1 2>>%s; echo $? > %s")
      :format(MEND, q(db), q(dir), q(log), q(status))
    local p = io.popen(("sh -c %s >/dev/null 2>&1 & echo $!"):format(q(inner)))
    local sh_pid = p:read("l")
    p:close()
    local up = true
    local ok, err = pcall(function()
      H.wait_for("the worker to start", function() return H.read(log) ~= "" or
        H.shell("pgrep -P " .. sh_pid) == 0 end, 20)
      local ids = start(db, dir, 1)
      H.wait_for("a run to end", function() return all_succeeded(db, ids) end, 60)
      local rc, out = H.shell("sh tests/pg/cluster.sh down " .. q(STATE))
      assert.are.equal(0, rc, out)
      up = false
      wait_for_line(log, "not back yet", "the worker to give up its first try")
      H.shell("pkill -TERM -P " .. sh_pid)
      -- before, each call the worker made tried for 10 s, and SIGTERM waited for them all
      H.wait_for("the worker to stop", function() return H.read(status) ~= "" end, 5)
    end)
    if not up then H.shell("sh tests/pg/cluster.sh up " .. q(STATE)) end
    H.shell("pkill -KILL -P " .. sh_pid)
    local text = H.read(log)
    assert(ok, tostring(err) .. "\n" .. text)
    assert.are.equal("1", (H.read(status):gsub("%s+$", "")))
    assert.matches("SIGTERM", text)
    assert.matches("mend: 127%.0%.0%.1:%d+/mend: .*lost", text)
    local password = db:match("//[^:]+:([^@]+)@")
    if password then assert.is_nil(text:find(password, 1, true), "the password is in the log") end
  end)
end)

-- `mend serve` answers a start once its batch is committed. A start that arrives while the
-- server is away goes into the batch the engine writes when it is back: answered 503 ("not
-- known to be recorded") only if it was not recorded, since a client that repeats a start
-- without a key makes a second run.
describe("mend serve on PostgreSQL whose server went away", function()
  after_each(H.cleanup)
  local STATE = os.getenv("MEND_TEST_PG_STATE")
  local it_restart = H.PG and STATE and it or pending

  -- POSTs a start without a key; returns the HTTP status and the answer's text.
  local function post_start(base)
    local p = assert(io.popen(("curl -s -m 60 -w ' %%{http_code}' -H 'Content-Type: application/json'"
      .. " -d '{\"workflow\":\"three\"}' %s/api/v1/runs"):format(base)))
    local text = p:read("a")
    p:close()
    return tonumber(text:match("(%d+)%s*$")), text
  end

  local function count_runs(db)
    local rc, out = mend_cmd(db, "runs --json")
    assert.are.equal(0, rc, out)
    return select(2, out:gsub('"workflow":"three"', ""))
  end

  it_restart("answers 503 for a start only when it was not recorded", function()
    local dir, db, log = fresh()
    local out = dir .. "/serve.out"
    local p = io.popen(("sh -c %s >/dev/null 2>&1 & echo $!"):format(q(("exec %s serve --db %s"
      .. " --workflows %s --listen 127.0.0.1:0 >%s 2>>%s"):format(MEND, q(db), q(dir), q(out), q(log)))))
    local pid = p:read("l")
    p:close()
    local up = true
    local ok, err = pcall(function()
      local base
      H.wait_for("the server to listen", function()
        base = H.read(out):match("serving (http://[%d%.]+:%d+)/api/v1")
        return base ~= nil
      end, 20)
      assert.are.equal(201, (post_start(base)))
      local rc, text = H.shell("sh tests/pg/cluster.sh down " .. q(STATE))
      assert.are.equal(0, rc, text)
      up = false
      assert.are.equal(503, (post_start(base)))   -- its batch lost with the connection
      rc, text = H.shell("sh tests/pg/cluster.sh up " .. q(STATE))
      assert.are.equal(0, rc, text)
      up = true
      -- the engine reconnects at its next try: the first starts may come before it
      local answers, n = {}, count_runs(db)
      for i = 1, 4 do
        local code, said = post_start(base)
        local now = count_runs(db)
        if code == 503 then assert.are.equal(n, now, "answered 503 but recorded: " .. said) end
        if code == 201 then assert.are.equal(n + 1, now, said) end
        answers[i], n = code, now
      end
      assert.are.equal(201, answers[4], table.concat(answers, " "))
    end)
    if not up then H.shell("sh tests/pg/cluster.sh up " .. q(STATE)) end
    H.stop_worker(pid)
    assert(ok, tostring(err) .. "\n" .. H.read(log))
  end)
end)

-- `mend run` whose server goes away for longer than it reconnects for (10 s): the error it
-- ends with, and every line it logs, are single lines naming the database problem; libpq's
-- own text ("server closed the connection unexpectedly\n\tThis probably means ...") was put in
-- whole, its later lines standing alone in the output.
describe("mend run on PostgreSQL whose server stays away", function()
  after_each(H.cleanup)
  local STATE = os.getenv("MEND_TEST_PG_STATE")
  local it_restart = H.PG and STATE and it or pending

  it_restart("ends with one line naming the database problem", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir)
    local steps = {}
    for i = 1, 60 do
      steps[i] = ("{ name = 's%d', execute = function() os.execute('sleep 0.5') return %d end }"):format(i, i)
    end
    H.write_file(dir, "long.lua", "return { name = 'long', steps = {\n" .. table.concat(steps, ",\n") .. " } }\n")
    local inner = ("cd %s && %s run long.lua --db %s >out 2>err; echo $? >rc"):format(q(dir), MEND, q(db))
    os.execute(("sh -c %s >/dev/null 2>&1 &"):format(q(inner)))
    local up = true
    local ok, err = pcall(function()
      H.wait_for("the run to begin", function() return H.read(dir .. "/err"):find("s2", 1, true) ~= nil end, 30)
      local rc, text = H.shell("sh tests/pg/cluster.sh down " .. q(STATE))
      assert.are.equal(0, rc, text)
      up = false
      H.wait_for("mend run to end", function() return H.read(dir .. "/rc") ~= "" end, 60)
      rc, text = H.shell("sh tests/pg/cluster.sh up " .. q(STATE))
      assert.are.equal(0, rc, text)
      up = true
    end)
    if not up then H.shell("sh tests/pg/cluster.sh up " .. q(STATE)) end
    local out, errtext = H.read(dir .. "/out"), H.read(dir .. "/err")
    assert(ok, tostring(err) .. "\n" .. out .. errtext)
    assert.are_not.equal("0", (H.read(dir .. "/rc"):gsub("%s+$", "")), out .. errtext)
    local last
    for line in errtext:gmatch("[^\n]+") do
      -- a JSON log line, or mend's own last word: nothing of a message on a line of its own
      assert.is_truthy(line:match("^{") or line:match("^mend: "), "a stray line: " .. line .. "\n" .. errtext)
      if line:match("^{") then
        assert.is_nil(line:find("\\n", 1, true), "a message of several lines: " .. line)
      else
        last = line
      end
    end
    assert.is_string(last, errtext)
    assert.matches("127%.0%.0%.1:%d+/mend: ", last)
    assert.is_nil(last:find("This probably means", 1, true), last)
  end)
end)
