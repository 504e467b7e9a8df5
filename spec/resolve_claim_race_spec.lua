-- A resolve of a run that cannot progress (its version cannot be loaded) is refused when a
-- worker claims the run between the resolve's first look (nobody holds it) and its
-- transaction: who holds it is read again in that transaction, as its status is. It resolved
-- the run behind that worker's back. Made deterministic by the MEND_PAUSE point (compiled in with
-- MEND_FAILPOINTS): the resolve stops between its look and its transaction until the spec,
-- having written the claim as a worker's would, lets it go. On SQLite and PostgreSQL.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"

local q, sh = H.quote, H.shell

describe("mend dlq resolve of a run that cannot progress, claimed meanwhile", function()
  after_each(function() H.cleanup() end)

  it("is refused naming the worker, and the run stays the worker's", function()
    local dir, db = S.workspace()
    local rc, out, err = H.mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    H.sql(db, ("UPDATE runs SET unavailable = 'version 1 cannot be loaded' WHERE id = '%s'"):format(id))
    local pause, done = dir .. "/paused", dir .. "/resolve.rc"
    sh(("(MEND_PAUSE=resolve_unavailable:%s timeout 60 %s dlq resolve %s --note 'by hand' --db %s >%s.out 2>&1;"
        .. " echo $? >%s.tmp; mv %s.tmp %s) >/dev/null 2>&1 &")
       :format(q(pause), H.MEND, id, q(db), q(done), q(done), q(done), q(done)))
    H.wait_for("the resolve to pause", function() return sh("test -e " .. q(pause)) == 0 end, 20)
    -- a worker elsewhere claims it, its lease lasting 10 minutes
    local lease = H.is_pg(db) and "clock_timestamp() + interval '10 minutes'"
                               or "CAST(strftime('%s', 'now') AS REAL) + 600"
    H.sql(db, ("INSERT INTO workers(owner, lease_until) VALUES ('elsewhere:1:w', %s)"):format(lease))
    H.sql(db, ("UPDATE runs SET owner = 'elsewhere:1:w' WHERE id = '%s'"):format(id))
    os.remove(pause)
    H.wait_for("the resolve to end", function() return H.read(done) ~= "" end, 30)
    local said = H.read(done .. ".out")
    assert.are.equal("1", H.read(done):match("%d+"), said)
    assert.matches("held by worker elsewhere:1:w", said)
    local st = H.status_json(db, id)
    assert.are.equal("running", st.status)
    assert.is_truthy(st.unavailable)
  end)
end)
