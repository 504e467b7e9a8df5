-- A lock met by a worker's claim, through a real `mend worker` and a real `sqlite3` shell. An
-- idle worker has nothing of its own to write: its claim of a new run is what meets another
-- process's write lock, and nothing is kept to be committed once the lock goes. The worker
-- must still take the run soon after the lock goes, not when some other write of its own
-- happens to begin (a lease renewal, seconds later; none at all while it holds no run).

local H = require "spec.helper"

local MEND, q, run = H.MEND, H.quote, H.shell
local read_number, succeeded = H.read_number, H.succeeded

local WORKFLOW = [[
return { name = "one", steps = { { name = "a", execute = function() return 1 end } } }
]]

-- SQLite only (#sqlite): the subject is SQLite's file write lock.
describe("a worker whose claim meets another process's lock #sqlite", function()
  local worker_pid
  after_each(function()
    if worker_pid then os.execute("kill -9 " .. worker_pid .. " 2>/dev/null") end
    worker_pid = nil
    H.cleanup()
  end)

  -- An idle worker (its first run done, nothing of its own left to write), stopped with a new
  -- run waiting for its next look; a sqlite3 shell takes the write lock, runs `inside` (lines
  -- of the shell) 1.4 s later and ends with `finish`; the worker goes on once the lock is
  -- held. The shell's handle (close: wait for it to end), the database and the worker's log.
  local function claim_meets_lock(inside, finish)
    local dir = H.tmp_dir()
    local db, wfdir = dir .. "/jobs.db", dir .. "/wf"
    assert(require("lfs").mkdir(wfdir))
    H.write_file(wfdir, "one.lua", WORKFLOW)
    local start = string.format("%s start one --db %s --workflows %s", MEND, q(db), q(wfdir))
    assert.are.equal(0, (run(start)))
    local log = dir .. "/worker.log"
    worker_pid = H.start_worker(db, wfdir, log, "--poll 0.05 --log-level debug")
    H.wait_for("the first run", function() return succeeded(db) == 1 end, 10)
    os.execute("sleep 0.3")
    -- stopped, so that the new run is there for its next look and the lock is taken first
    assert.are.equal(0, (run("kill -STOP " .. worker_pid)))
    local rc, out = run(start)
    assert.are.equal(0, rc, out)
    local took = dir .. "/took"
    local holder = assert(io.popen("sqlite3 " .. q(db) .. " >/dev/null", "w"))
    holder:write(".bail on\nBEGIN IMMEDIATE;\nINSERT INTO meta VALUES('lock-test', 'x');\n",
                 ".system date +%s.%N >" .. q(took) .. "\n", ".system sleep 1.4\n",
                 inside:gsub("DIR", dir), finish, ";\n.quit\n")
    holder:flush()
    H.wait_for("the holder to take the lock", function() return read_number(took) end, 10)
    assert.are.equal(0, (run("kill -CONT " .. worker_pid)))
    return holder, db, log, dir
  end

  it("takes the run within a few seconds of the lock's release", function()
    local holder, db, log, dir = claim_meets_lock(".system date +%s.%N >DIR/freed\n", "ROLLBACK")
    holder:close()   -- returns once the shell has rolled back
    local t_free = assert(read_number(dir .. "/freed"))
    local text = H.slurp(log)
    assert.matches('"level":"warn"[^\n]*database is locked by another process', text)
    -- a claim retried as a batch is (50 ms doubling to 1 s), not left to another write
    H.wait_for("the second run, soon after the lock went", function() return succeeded(db) == 2 end, 4)
    local ended = tonumber(H.sql(db, "SELECT max(updated) FROM runs WHERE status = 'succeeded'")[1])
    assert.is_truthy(ended - t_free < 3, ("ended %.2f s after the release"):format(ended - t_free))
    assert.matches("database lock is gone after", H.slurp(log))
  end)

  -- The lock goes, and what the claim was for is no longer there (the holder made the run
  -- unavailable as it committed: another worker's take, deterministically): the worker's looks
  -- find nothing to write, and nothing of its own begins a batch. It still tells the lock's end,
  -- and starts the next lock's clock afresh.
  it("tells the lock's end when its look finds nothing left to claim", function()
    local holder, _, log = claim_meets_lock(
      "UPDATE runs SET unavailable = 'taken elsewhere' WHERE status = 'running';\n"
      .. "DELETE FROM meta WHERE key = 'lock-test';\n", "COMMIT")
    H.wait_for("the worker to meet the lock", function()
      return H.slurp(log):find("database is locked by another process", 1, true) ~= nil
    end, 10)
    holder:close()
    H.wait_for("the lock's end told", function()
      return H.slurp(log):find("database lock is gone after", 1, true) ~= nil
    end, 5)
    local gone = tonumber(H.slurp(log):match("database lock is gone after ([%d.]+) s"))
    assert.is_truthy(gone < 5, "a lock of 1.4 s told gone after " .. tostring(gone) .. " s")
  end)
end)
