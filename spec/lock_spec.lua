-- A lock held by another process, through a real `mend worker` and a real `sqlite3` shell
-- holding the write lock (BEGIN IMMEDIATE) on the same file while runs are in flight, until
-- the worker's lease has run out and its runs' durable sleeps have ended under it. The worker
-- waits it out: it stays alive, warns in its log, runs nothing that an uncommitted transition
-- announces (the write-ahead rule), and every run succeeds once the lock goes, with its whole
-- history.

local H = require "spec.helper"

local MEND, q, run = H.MEND, H.quote, H.shell
local read_number = H.read_number

-- Each execute appends "<run> <step> <wall time>" to the effects file (the time from `date`:
-- os.time() has whole seconds only); `nap` is a durable
-- sleep that ends while the lock is held: long enough that the last run reaches it and the
-- holder takes the lock before the first run's nap ends, even on a loaded machine (with 2 s,
-- the five `mend start`s and the holder's start outlasted it under load, and a run's b ran
-- before the lock was taken), short enough to end within the lock's 10 s.
local WORKFLOW = [[
local effects = %q
local function effect(ctx, step)
  local clock = assert(io.popen("date +%%s.%%N"))
  local now = clock:read("a"):gsub("%%s+$", "")
  clock:close()
  local f = assert(io.open(effects, "a"))
  f:write(ctx.run_id, " ", step, " ", now, "\n")
  f:close()
end
return {
  name = "hops",
  steps = {
    { name = "a", execute = function(ctx) effect(ctx, "a"); return 1 end },
    { name = "nap", sleep = 5 },
    { name = "b", execute = function(ctx) effect(ctx, "b"); return 2 end },
    { name = "c", execute = function(ctx) effect(ctx, "c"); return 3 end },
  },
}
]]

-- SQLite only (#sqlite): the subject is SQLite's file write lock, which PostgreSQL has no
-- equivalent of (its row locks are the PostgreSQL store's own, tested with it).
describe("a lock held by another process past a lease #sqlite", function()
  local worker_pid
  after_each(function()
    if worker_pid then os.execute("kill -9 " .. worker_pid .. " 2>/dev/null") end
    worker_pid = nil
    H.cleanup()
  end)

  it("is waited out by a worker, which warns, runs nothing unannounced, and finishes every run", function()
    local dir = H.tmp_dir()
    local db, effects = dir .. "/jobs.db", dir .. "/effects"
    local wfdir = dir .. "/wf"
    assert(require("lfs").mkdir(wfdir))
    H.write_file(wfdir, "hops.lua", WORKFLOW:format(effects))
    local log = dir .. "/worker.log"
    -- a lease shorter than the lock: the worker cannot renew it meanwhile (the fence holds)
    worker_pid = H.start_worker(db, wfdir, log, "--lease 4")
    local ids = {}
    for i = 1, 5 do
      local rc, out = run(string.format("%s start hops --db %s --workflows %s --input '{\"n\":%d}'",
                                        MEND, q(db), q(wfdir), i))
      assert.are.equal(0, rc, out)
      ids[#ids + 1] = out:match("(%S+)")
    end
    -- every run has done `a` and sleeps in `nap` (its wait ends while the lock is held)
    H.wait_for("the runs to reach nap", function()
      return H.sql(db, "SELECT count(*) FROM history_named WHERE step = 'nap'"
                       .. " AND to_status = 'sleeping'")[1] == "5"
    end, 10)
    -- another process takes the write lock and holds it until the test says; it notes when it
    -- has it and when it lets go
    local took, freed = dir .. "/took", dir .. "/freed"
    local holder = assert(io.popen("sqlite3 " .. q(db) .. " >/dev/null", "w"))
    holder:write(".bail on\nBEGIN IMMEDIATE;\nINSERT INTO meta VALUES('lock-test', 'x');\n",
                 ".system date +%s.%N >" .. q(took) .. "\n")
    holder:flush()
    H.wait_for("the holder to take the lock", function() return read_number(took) end, 10)
    -- what the lock must outlast, as committed before it (read under it): the naps' ends and
    -- the worker's lease
    local naps_end = tonumber(H.sql(db, "SELECT max(due) FROM steps WHERE name = 'nap'")[1])
    local lease_end = tonumber(H.sql(db, "SELECT max(lease_until) FROM workers WHERE owner IN"
      .. " (SELECT owner FROM runs)")[1])
    assert.is_truthy(naps_end and lease_end, "no nap's end or no lease of the worker's")
    -- meanwhile the worker lives on and says why nothing moves, while every nap ends and its
    -- lease runs out (it cannot renew it under the lock: the fence holds)
    H.wait_for("the worker's warning", function()
      return H.slurp(log):find('"level":"warn"[^\n]*database is locked by another process')
    end, 15)
    H.wait_for("the naps' ends and the lease's", function()
      return H.wall() > math.max(naps_end, lease_end) + 0.2
    end, 15)
    assert.are.equal(0, (run("kill -0 " .. worker_pid)), "the worker exited while locked")
    -- reads go on meanwhile: `mend status` answers at once
    local rc, out = run(string.format("%s status %s --db %s", MEND, ids[1], q(db)))
    assert.are.equal(0, rc, out)
    assert.matches("hops run " .. ids[1], out)
    holder:write(".system date +%s.%N >" .. q(freed) .. "\n", "ROLLBACK;\n.quit\n")
    holder:close()   -- returns once the shell has rolled back
    local t_free = assert(read_number(freed))
    H.wait_for("every run to succeed", function() return H.succeeded(db) == 5 end, 15)
    assert.are.equal(0, (run("kill -0 " .. worker_pid)), "the worker exited")
    local text = H.slurp(log)
    assert.matches("database lock is gone after", text)
    assert.is_nil(text:find('"level":"error"'), text)
    assert.is_nil(text:find('"event":"lease"'), "no run was taken from the worker: " .. text)
    -- the write-ahead rule: b and c were announced while the lock was held (nap ended then),
    -- and ran only after it went
    local ran = {}
    for line in io.lines(effects) do
      local id, step, at = line:match("^(%S+) (%S+) (%S+)$")
      ran[id .. "/" .. step] = (ran[id .. "/" .. step] or 0) + 1
      if step ~= "a" then
        assert.is_truthy(tonumber(at) > t_free, step .. " ran while the lock was held: " .. line)
      end
    end
    -- a complete history: every step once, in order, each transition recorded
    for _, id in ipairs(ids) do
      for _, step in ipairs({ "a", "b", "c" }) do
        assert.are.equal(1, ran[id .. "/" .. step], id .. "/" .. step)
      end
      local rows = H.sql(db, "SELECT coalesce(step, '-') || ':' || coalesce(from_status, '')"
        .. " || '>' || to_status FROM history_named WHERE run_id = '" .. id .. "'"
        .. " AND event IN ('step', 'run') ORDER BY seq")
      assert.are.same({ "-:>running",
                        "a:pending>running", "a:running>succeeded",
                        "nap:pending>sleeping", "nap:sleeping>pending", "nap:pending>succeeded",
                        "b:pending>running", "b:running>succeeded",
                        "c:pending>running", "c:running>succeeded",
                        "-:running>succeeded" }, rows)
    end
    -- and it stops as usual
    assert.are.equal(0, (run("kill -TERM " .. worker_pid)))
    H.wait_for("the worker to exit", function() return run("kill -0 " .. worker_pid) ~= 0 end, 15)
    worker_pid = nil
  end)
end)
