-- Wake-ups between processes on PostgreSQL (issue 20): a `mend worker` whose poll interval is
-- ten minutes takes a run that another process started, and a run it holds takes an event
-- that another process sent, long before its next poll: only the NOTIFY that the other
-- process's COMMIT sends can explain it. Needs the test cluster (MEND_TEST_PG); pending
-- without it.

local H = require "spec.helper"

local MEND, q = H.MEND, H.quote

local function mend_cmd(db, args)
  return H.shell(("%s %s --db %s"):format(MEND, args, q(db)))
end

-- A worker that polls every 600 s: after its first poll, only a wake-up makes it look.
local function worker(db, dir, log)
  local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 600 2>>%s' >/dev/null & echo $!")
    :format(MEND, q(db), q(dir), q(log)))
  local pid = p:read("l")
  p:close()
  return pid
end

-- The worker listens once its first poll is over (wake.c): from then on, a run started is
-- one its first poll did not see.
local function listening(db)
  local rows = H.sql(db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    .. " AND query LIKE 'LISTEN %' AND query LIKE '%' || current_schema() || '%'")
  return rows[1] == "1"
end

-- Read with SQL, as an operator would (mend status reads more than this store has yet).
local function step_status(db, id, name)
  return H.sql(db, ("SELECT status FROM steps WHERE run_id = '%s' AND name = '%s'"):format(id, name))[1]
end

describe("wake-ups on PostgreSQL", function()
  after_each(H.cleanup)
  local it_pg = H.PG and it or pending

  it_pg("a worker polling every 600 s takes a run started and an event sent by other processes",
        function()
    local dir = H.tmp_dir()
    H.write_file(dir, "quest.lua", H.slurp("workflows/quest.lua"))
    local db, log = H.new_db(), dir .. "/worker.log"
    local pid = worker(db, dir, log)
    local ok, err = pcall(function()
      H.wait_for("the worker to listen", function() return listening(db) end, 60)
      local rc, out = mend_cmd(db, [[start quest --workflows ]] .. q(dir)
        .. [[ --input '{"player":1,"quest":"rats"}']])
      assert.are.equal(0, rc, out)
      local id = out:match("(%S+)")
      -- 60 s against a next poll 480 s or more away (600 s, jittered by a fifth at most)
      H.wait_for("the run to be taken and wait", function()
        return step_status(db, id, "kill") == "waiting"
      end, 60)
      rc, out = mend_cmd(db, "signal " .. id .. [[ boss_killed --data '{"gold":7}']])
      assert.are.equal(0, rc, out)
      H.wait_for("the run to end", function()
        return H.sql(db, ("SELECT status FROM runs WHERE id = '%s'"):format(id))[1] == "succeeded"
      end, 60)
      assert.are.equal("succeeded", step_status(db, id, "reward"))
    end)
    H.stop_worker(pid)
    assert(ok, tostring(err) .. "\n" .. H.read(log))
  end)
end)
