-- Storage faults through the real `mend` command: a full disk, a file size limit, a locked
-- database, a file that is not a mend database, a database from a newer mend. Each gives a
-- clear error naming the file and the cause, exits 1 (never a workflow outcome: 0, 3 or 4),
-- and loses nothing that was committed.
-- SQLite only (#sqlite): each fault here is one of a database file (its disk, its folder,
-- its file lock, its bytes, its user_version); PostgreSQL's faults (a server down, a wrong
-- password, a database that is not mend's) are the PostgreSQL store's own specs.
local H = require "spec.helper"

local mend = require "mend"
local MEND, q, run = H.MEND, H.quote, H.shell

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local QUICK_WORKFLOW = [[
return { name = "quick", steps = { { name = "a", execute = function() return 1 end } } }
]]

local BIG_STEP_WORKFLOW = [[
return { name = "big", steps = {
  { name = "one", execute = function(ctx, input) return string.rep("x", 40000) .. ctx.run_id end },
  { name = "two", execute = function(ctx, input) return string.rep("y", 40000) .. ctx.run_id end },
} }
]]

describe("a full disk #sqlite", function()
  local mnt
  after_each(function()
    if mnt then os.execute("umount " .. mnt .. " 2>/dev/null") end
    H.cleanup()
  end)

  it("stops the worker with a clear error, keeps the database intact, and the runs finish once space is back", function()
    mnt = H.tmp_dir()
    local mounted = os.execute("mount -t tmpfs -o size=1m tmpfs " .. mnt .. " 2>/dev/null")
    if not mounted then
      pending("needs root to mount a small tmpfs")
      mnt = nil
      return
    end
    local wfdir = H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    local db = mnt .. "/mend.db"
    local ids = {}
    for i = 1, 12 do
      local rc, out = run(string.format("%s start big --db %s --workflows %s --input '{\"i\":%d}'", MEND, db, wfdir, i))
      assert.are.equal(0, rc, out)
      ids[#ids + 1] = out:match("(%S+)")
    end
    local rc, out = run(string.format("%s worker --db %s --workflows %s --poll 0.01 --lease 1", MEND, db, wfdir))
    assert.are.equal(1, rc, out)
    assert.matches(db .. ": [%w ]+: database or disk is full", out)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
    -- what was committed before the failure is all there
    assert.are.equal(tostring(#ids), H.sql(db, "SELECT count(*) FROM runs")[1])
    -- space comes back: a new worker finishes every run
    assert.is_truthy(os.execute("mount -o remount,size=64m " .. mnt))
    local pid_out = io.popen(string.format(
      "sh -c 'exec %s worker --db %s --workflows %s --poll 0.01 --lease 1 >/dev/null 2>&1' & echo $!",
      MEND, db, wfdir)):read("l")
    for _, id in ipairs(ids) do
      local wrc, wout = run(string.format("%s wait %s --db %s --timeout 30", MEND, id, db))
      assert.are.equal(0, wrc, wout)
    end
    os.execute("kill -TERM " .. pid_out)
    H.wait_for("the worker to stop", function() return not H.alive(pid_out) end, 15)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

describe("a file size limit #sqlite", function()
  after_each(H.cleanup)

  -- RLIMIT_FSIZE is how a full disk can be made without root: a write past it kills the
  -- process (SIGXFSZ) unless the signal is ignored, and fails with EFBIG when it is.
  it("makes the worker exit 1 naming the file and the limit, keeps the database intact, and the runs finish without it", function()
    local wfdir, dir = H.tmp_dir(), H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    local db = dir .. "/mend.db"
    local ids = {}
    for i = 1, 6 do
      local rc, out = run(string.format("%s start big --db %s --workflows %s --input '{\"i\":%d}'", MEND, db, wfdir, i))
      assert.are.equal(0, rc, out)
      ids[#ids + 1] = out:match("(%S+)")
    end
    local rc, out = run(string.format("sh -c 'ulimit -f 256; exec %s worker --db %s --workflows %s --poll 0.01 --lease 1'",
                                      MEND, db, wfdir))
    assert.are.equal(1, rc, out)
    assert.matches(db .. ": [%w ]+: disk I/O error %(this process may write no file past 131072 bytes: its file size limit, RLIMIT_FSIZE", out)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
    assert.are.equal(tostring(#ids), H.sql(db, "SELECT count(*) FROM runs")[1])
    local pid = io.popen(string.format(
      "sh -c 'exec %s worker --db %s --workflows %s --poll 0.01 --lease 1 >/dev/null 2>&1' & echo $!",
      MEND, db, wfdir)):read("l")
    for _, id in ipairs(ids) do
      local wrc, wout = run(string.format("%s wait %s --db %s --timeout 30", MEND, id, db))
      assert.are.equal(0, wrc, wout)
    end
    os.execute("kill -TERM " .. pid)
    H.wait_for("the worker to stop", function() return not H.alive(pid) end, 15)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

describe("a read-only file system #sqlite", function()
  local mnt
  after_each(function()
    if mnt then os.execute("umount " .. mnt .. " 2>/dev/null") end
    H.cleanup()
  end)

  it("refuses to open the database with the file and the cause named, and loses nothing", function()
    mnt = H.tmp_dir()
    if not os.execute("mount -t tmpfs -o size=4m tmpfs " .. mnt .. " 2>/dev/null") then
      pending("needs root to mount a small tmpfs")
      mnt = nil
      return
    end
    local wfdir = H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    local db = mnt .. "/mend.db"
    local rc, out = run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    assert.is_truthy(os.execute("mount -o remount,ro " .. mnt))
    rc, out = run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(1, rc, out)
    assert.matches(db .. ": .*the file is read%-only %(Read%-only file system%)", out)
    -- WAL mode needs its shared-memory file even to read: reads fail as clearly, naming that
    -- file, not "No such file or directory" as if the database were missing
    rc, out = run(string.format("%s status %s --db %s --json", MEND, id, db))
    assert.are.equal(1, rc, out)
    assert.matches("read%-only", out)
    assert.matches(db .. "%-shm file", out)
    assert.not_matches("No such file", out)
    -- writable again: everything is there
    assert.is_truthy(os.execute("mount -o remount,rw " .. mnt))
    rc, out = run(string.format("%s status %s --db %s --json", MEND, id, db))
    assert.are.equal(0, rc, out)
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
  end)
end)

-- The deleted-file cases: a `mend` process in the background, its stderr in dir/NAME.log, its
-- pid in dir/NAME.pid and its exit code, once it ends, in dir/NAME.rc. Killed after each test.
local background = {}

local function start_in_background(dir, name, args)
  local log, done, pidfile = dir .. "/" .. name .. ".log", dir .. "/" .. name .. ".rc", dir .. "/" .. name .. ".pid"
  os.execute(string.format("sh -c '%s %s >%s 2>%s & echo $! >%s; wait $!; echo $? >%s' >/dev/null 2>&1 &",
                           MEND, args, dir .. "/" .. name .. ".out", log, pidfile, done))
  background[#background + 1] = pidfile
  return log, done
end

local function kill_background()
  for i = #background, 1, -1 do
    local pid = H.read(background[i]):match("%d+")
    if pid then os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
    background[i] = nil
  end
  H.cleanup()
end

local function remove_db(db)
  os.remove(db)
  os.remove(db .. "-wal")
  os.remove(db .. "-shm")
end

-- A folder with quick.lua, another with mend.db holding a run of it: both folders, the
-- database and the run's id.
local function quick_run()
  local wfdir, dir = H.tmp_dir(), H.tmp_dir()
  write(wfdir .. "/quick.lua", QUICK_WORKFLOW)
  local db = dir .. "/mend.db"
  local rc, out = run(string.format("%s start quick --db %s --workflows %s", MEND, db, wfdir))
  assert.are.equal(0, rc, out)
  return wfdir, dir, db, out:match("%S+")
end

-- The process stopped, exit 1, its log naming db's file as gone (why names db's step).
local function stopped_naming(db, log, done, why)
  local ok = pcall(H.wait_for, "the process to exit", function() return H.read(done) ~= "" end, 10)
  assert(ok, "it goes on:\n" .. H.read(log))
  assert.are.equal("1", H.read(done):match("%d+"), H.read(log))
  assert.matches(db:gsub("%p", "%%%0") .. ": " .. why .. "the database file was deleted or moved", H.read(log))
end

describe("a database deleted under a running worker #sqlite", function()
  after_each(kill_background)

  -- In WAL mode SQLite writes on to an unlinked file: without a look, every later batch
  -- would be answered durable and go with the process.
  it("stops the worker with an error naming the file, rather than writing on to a file that is gone", function()
    local wfdir, dir = H.tmp_dir(), H.tmp_dir()
    write(wfdir .. "/slow.lua", [[
return { name = "slow", steps = {
  { name = "a", execute = function(ctx) ctx:sleep(0.3) return 1 end },
  { name = "b", execute = function(ctx) ctx:sleep(0.3) return 2 end },
  { name = "c", execute = function(ctx) ctx:sleep(0.3) return 3 end },
  { name = "d", execute = function(ctx) ctx:sleep(0.3) return 4 end },
} }
]])
    local db = dir .. "/mend.db"
    local rc, out = run(string.format("%s start slow --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(0, rc, out)
    local log, done = start_in_background(dir, "worker", ("worker --db %s --workflows %s --poll 0.05"):format(db, wfdir))
    H.wait_for("the run's first step", function()
      return H.read(log):find('"step":"a"', 1, true) ~= nil
    end, 10)
    remove_db(db)
    stopped_naming(db, log, done, "commit: ")
  end)
end)

-- A worker with nothing to do commits nothing: its polls look at the file too, or, deleted
-- under it, it would poll the unlinked file for good, a run started on the new file at that
-- path (as `mend start` makes one) never taken, and stop with exit 0 without a word.
describe("a database deleted under an idle worker #sqlite", function()
  after_each(kill_background)

  it("stops the worker naming the file, or the worker takes the runs of the file now there", function()
    local wfdir, dir, db, first = quick_run()
    local log, done = start_in_background(dir, "worker", ("worker --db %s --workflows %s --poll 0.05"):format(db, wfdir))
    H.wait_for("the first run done", function()
      return H.read(log):find('"run":"' .. first .. '"', 1, true) ~= nil and
             H.read(log):find('running -> succeeded","run":"' .. first, 1, true) ~= nil
    end, 10)
    os.execute("sleep 0.5")
    remove_db(db)
    local rc, out = run(string.format("%s start quick --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(0, rc, out)
    local second = out:match("%S+")
    local status
    for _ = 1, 50 do
      if H.read(done) ~= "" then break end
      local _, st = run(string.format("%s status %s --db %s --json", MEND, second, db))
      status = st:match('"status":"(%a+)"')
      if status == "succeeded" then break end
      os.execute("sleep 0.1")
    end
    local exited = H.read(done):match("%d+")
    assert.truthy(status == "succeeded" or exited == "1",
                  "5 s on: the run on the new file is " .. tostring(status) .. ", the worker " ..
                  (exited and ("exited " .. exited) or "still running, saying nothing") .. ":\n" .. H.read(log))
    if exited == "1" then assert.matches("deleted or moved", H.read(log)) end
  end)
end)

-- `mend serve` commits nothing while it is only asked to read: without a look at the file it
-- answered reads from the deleted file and refused writes with 503 for good, and exited 0 when
-- stopped. It stops as a worker does, naming the file, exit 1.
describe("a database deleted under mend serve #sqlite", function()
  after_each(kill_background)

  it("stops the server with an error naming the file, exit 1", function()
    local wfdir, dir, db = quick_run()
    local log, done = start_in_background(dir, "serve", ("serve --db %s --workflows %s --listen 127.0.0.1:0"):format(db, wfdir))
    H.wait_for("the server to listen", function()
      return H.read(dir .. "/serve.out"):find("serving http", 1, true) ~= nil or H.read(done) ~= ""
    end, 10)
    remove_db(db)
    stopped_naming(db, log, done, "")
  end)
end)

-- A database file bind-mounted on its own (a container's `-v ./mend.db:/data/mend.db`) and
-- deleted on the host: the path still names the same inode, now with no link, which
-- SQLITE_FCNTL_HAS_MOVED (inode numbers only) does not see: the link count tells, or the
-- worker would write on into the unlinked file, its runs "succeed" and go with the process. Needs mount namespaces (root
-- or user namespaces); pending where `unshare -m` is refused.
describe("a bind-mounted database deleted on the host under a running worker #sqlite", function()
  after_each(H.cleanup)

  it("stops the worker with an error naming the file", function()
    if os.execute("unshare -m true 2>/dev/null") ~= true then
      return pending("no mount namespace here (unshare -m)")
    end
    local wfdir, dir = H.tmp_dir(), H.tmp_dir()
    write(wfdir .. "/slow.lua", [[
return { name = "slow", steps = {
  { name = "a", execute = function(ctx) ctx:sleep(0.3) return 1 end },
  { name = "b", execute = function(ctx) ctx:sleep(0.3) return 2 end },
  { name = "c", execute = function(ctx) ctx:sleep(0.3) return 3 end },
} }
]])
    os.execute("mkdir -p " .. q(dir .. "/host") .. " " .. q(dir .. "/ctr"))
    local hostdb, db = dir .. "/host/mend.db", dir .. "/ctr/mend.db"
    for _ = 1, 3 do
      local rc, out = run(string.format("%s start slow --db %s --workflows %s", MEND, q(hostdb), q(wfdir)))
      assert.are.equal(0, rc, out)
    end
    local log, done = dir .. "/worker.log", dir .. "/worker.rc"
    -- In a mount namespace of its own: the file bound on ctr/mend.db, a worker on that path,
    -- the host's name removed once the first step began, then at most 5 s for the worker.
    local script = table.concat({
      "touch " .. q(db) .. " && mount --bind " .. q(hostdb) .. " " .. q(db) .. " || exit 1",
      MEND .. " worker --db " .. q(db) .. " --workflows " .. q(wfdir) .. " --poll 0.05 2>" .. q(log) .. " &",
      "w=$!",
      [[i=0; until grep -q '"step":"a"' ]] .. q(log) .. " 2>/dev/null; do sleep 0.05; i=$((i+1)); [ $i -lt 200 ] || break; done",
      "rm -f " .. q(hostdb) .. " " .. q(hostdb .. "-wal") .. " " .. q(hostdb .. "-shm"),
      "i=0; while kill -0 $w 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done",
      "if kill -0 $w 2>/dev/null; then kill -TERM $w; wait $w || true; echo running >" .. q(done) ..
        "; else rc=0; wait $w || rc=$?; echo $rc >" .. q(done) .. "; fi",
    }, "\n")
    local sh = dir .. "/ns.sh"
    write(sh, script .. "\n")
    os.execute("unshare -m sh " .. q(sh) .. " >/dev/null 2>&1")
    assert.are.equal("1", H.read(done):match("%w+"), "the worker went on writing into the unlinked file:\n" .. H.read(log))
    assert.matches("the database file was deleted or moved", H.read(log))
  end)
end)

describe("a database in a folder that does not exist #sqlite", function()
  after_each(H.cleanup)

  it("is refused with the folder named as missing, and nothing is created", function()
    local wfdir = H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    local missing = H.tmp_dir() .. "/not/there"
    local rc, out = run(string.format("%s start big --db %s/mend.db --workflows %s", MEND,
                                      missing, wfdir))
    assert.are.equal(1, rc, out)
    assert.matches("its folder " .. missing:gsub("%p", "%%%0") .. " does not exist", out)
    assert.is_nil(io.open(missing))
  end)

  it("is refused naming a folder given as the database, and what to give instead", function()
    local wfdir, folder = H.tmp_dir(), H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    for _, cmd in ipairs { "start big --workflows " .. wfdir, "runs" } do
      local rc, out = run(string.format("%s %s --db %s/", MEND, cmd, folder))
      assert.are.equal(1, rc, out)
      assert.matches("(it is a folder: a database is a file; give a path in it, as " .. folder .. "/mend.db)",
                     out, 1, true)
    end
  end)
end)

describe("a locked database #sqlite", function()
  after_each(H.cleanup)

  it("makes `mend start` wait out the busy timeout, then fail naming the file, and work once the lock is gone", function()
    local db = H.tmp_db()
    local wfdir = H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    local rc, out = run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(0, rc, out)
    -- another process takes the write lock and keeps it
    local holder = assert(io.popen("sqlite3 " .. q(db), "w"))
    holder:write("BEGIN EXCLUSIVE; INSERT INTO meta VALUES('lock-test', 'x');\n")
    holder:flush()
    os.execute("sleep 0.2")
    local t0 = H.wall()
    rc, out = run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(1, rc, out)
    assert.matches(db .. ".*database is locked", out)
    -- mend's own error, as the README shows it: no position in mend's Lua files before it
    assert.matches("^mend: start: " .. db:gsub("%p", "%%%0") .. ": ", out)
    local waited = H.wall() - t0
    assert.is_truthy(waited >= 4.5)   -- it waited the busy timeout out first
    -- and no longer: the wait is counted in time, not in sleeps (on a loaded machine 5 s of
    -- 250 us sleeps lasted 14 s)
    assert.is_truthy(waited < 9, waited)
    holder:write("ROLLBACK;\n.quit\n")
    holder:close()
    rc, out = run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(0, rc, out)
    assert.are.equal("2", H.sql(db, "SELECT count(*) FROM runs")[1])
  end)

  -- Another process holds the write lock for about a second (well inside the 5 s every command
  -- that writes waits); a step of this file's own engine waits meanwhile.
  local function hold_lock_briefly(db)
    local marker = H.tmp_db()
    os.remove(marker)
    local holder = assert(io.popen("sqlite3 " .. q(db) .. " >/dev/null", "w"))
    holder:write(".bail on\nBEGIN IMMEDIATE;\n", ".system touch " .. q(marker) .. "\n",
                 ".system sleep 1\n", "ROLLBACK;\n.quit\n")
    holder:flush()
    H.wait_for("the holder to take the lock", function() return io.open(marker) end, 10)
    return holder
  end

  it("makes `mend signal` and `mend complete` wait for a lock of a second, as `mend start` does", function()
    local db = H.tmp_db()
    local dir = H.tmp_dir()
    local token_file = dir .. "/token"
    write(dir .. "/gate.lua", ([[
return { name = "gate", steps = {
  { name = "go", wait_for = "go" },
  { name = "ok", wait = "token", execute = function(ctx)
      local f = assert(io.open(%q, "w")); f:write(ctx:token()); f:close() end },
} }
]]):format(token_file))
    -- an engine that carries the run on to its wait, then gives it back for the next
    local function carry_on()
      local eng = mend.engine{ db = db, clock = "virtual" }
      eng:load(dir .. "/gate.lua")
      eng:recover()
      eng:advance(1)
      return eng
    end
    local eng = mend.engine{ db = db, clock = "virtual" }
    eng:load(dir .. "/gate.lua")
    local id = eng:start("gate", {})
    eng:advance(1)
    eng:close()
    local holder = hold_lock_briefly(db)
    local rc, out = run(string.format("%s signal %s go --db %s --key g1", MEND, id, q(db)))
    holder:close()
    assert.are.equal(0, rc, out)
    eng = carry_on()
    assert.are.equal("waiting", H.step(eng:status(id), "ok").status)
    eng:close()
    holder = hold_lock_briefly(db)
    rc, out = run(string.format("%s complete %s --db %s", MEND, H.read(token_file), q(db)))
    holder:close()
    assert.are.equal(0, rc, out)
    eng = carry_on()
    assert.are.equal("succeeded", eng:status(id).status)
    eng:close()
  end)

  it("is waited for by the writer thread while the loop sleeps instead of spinning", function()
    local eng, db = H.new_engine({ clock = "real" })   -- a file and the real clock: the writer thread
    eng:register{ name = "quick", steps = { { name = "one", execute = function() return 1 end } } }
    -- what 2,000 runs cost without the lock (a sanitizer's build takes many times longer)
    local c_free = os.clock()
    for i = 1, 2000 do eng:start("quick", { i = i }) end
    eng:run()   -- the schema and the worker's first rows are in before the lock is taken
    c_free = os.clock() - c_free
    -- another process holds the write lock for a second, then lets go (well inside the busy
    -- timeout); the marker says it has the lock
    local marker = H.tmp_db()
    os.remove(marker)
    local holder = assert(io.popen("sqlite3 " .. q(db) .. " >/dev/null", "w"))
    holder:write(".bail on\nBEGIN IMMEDIATE;\n", ".system touch " .. q(marker) .. "\n",
                 ".system sleep 1\n", "ROLLBACK;\n.quit\n")
    holder:flush()
    local deadline = H.wall() + 10
    while not io.open(marker) and H.wall() < deadline do os.execute("sleep 0.01") end
    assert.is_truthy(io.open(marker), "the holder never took the lock")
    local w0, c0 = H.wall(), os.clock()
    for i = 1, 2000 do eng:start("quick", { i = i }) end   -- batches for the thread
    eng:run()
    local wall, cpu = H.wall() - w0, os.clock() - c0
    holder:close()
    assert.are.equal("4000", H.sql(db, "SELECT count(*) FROM runs WHERE status = 'succeeded'")[1])
    assert.is_truthy(wall >= c_free + 0.5, "the lock was not in the way: run() took " .. wall .. " s")
    -- a loop polling while the thread waits would spend the whole wait on the CPU
    assert.is_truthy(cpu < c_free + 0.5 * (wall - c_free),
      string.format("%.2f s of CPU in %.2f s (%.2f s without the lock)", cpu, wall, c_free))
  end)
end)

describe("a file that is not a mend database #sqlite", function()
  after_each(H.cleanup)

  it("is refused by name, and left untouched", function()
    local dir = H.tmp_dir()
    local path = dir .. "/notes.txt"
    write(path, "these are my notes, not a database\n")
    local rc, out = run(string.format("%s dlq --db %s", MEND, path))
    assert.are.equal(1, rc)
    assert.matches(path .. ": file is not a database", out)
    local f = assert(io.open(path))
    assert.are.equal("these are my notes, not a database\n", f:read("a"))
    f:close()
  end)

  it("refuses a database of a newer mend, naming the versions", function()
    local db = H.tmp_db()
    local wfdir = H.tmp_dir()
    write(wfdir .. "/big.lua", BIG_STEP_WORKFLOW)
    assert.are.equal(0, (run(string.format("%s start big --db %s --workflows %s", MEND, db, wfdir))))
    H.sql(db, "PRAGMA user_version = 99")
    local rc, out = run(string.format("%s worker --db %s --workflows %s", MEND, db, wfdir))
    assert.are.equal(1, rc)
    assert.matches(db .. ": schema version 99 is newer than this mend %(%d+%)", out)
  end)

  it("refuses a SQLite database of another program", function()
    local db = H.tmp_db()
    H.sql(db, "CREATE TABLE invoices(id INTEGER PRIMARY KEY, total REAL)")
    local rc, out = run(string.format("%s dlq --db %s", MEND, db))
    assert.are.equal(1, rc)
    assert.matches(db .. ": not a mend database", out)
    assert.are.same({ "invoices" }, H.sql(db, "SELECT name FROM sqlite_master"))
  end)
end)
