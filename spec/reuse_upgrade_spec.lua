-- A database an older mend wrote reuses in (custom_key 1, as an execution: mends before
-- schema 18 / PostgreSQL 8) is migrated so that those rows read as reuses: their runs never
-- compensate the owner's effect, and the lookup never offers them as a key's result.
-- Not tagged #sqlite: these run on PostgreSQL too.
local H = require "spec.helper"
local R = require "spec.support.orders"   -- the order workflow: a keyed charge, a wait

-- What a mend before the bump left: reuses as custom_key 1, no `reused` history row, and its
-- schema version (the one before this mend's).
local function as_older_mend(db)
  local pg = H.is_pg(db)
  H.sql(db, "UPDATE steps SET custom_key = 1 WHERE custom_key = 2")
  if pg then
    H.sql(db, "DELETE FROM history WHERE event = 'reused'")
  else
    H.sql(db, "DELETE FROM history WHERE run_id || '/' || seq IN (SELECT run_id || '/' || seq"
      .. " FROM history_named WHERE event = 'reused')")
  end
  H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 7 or 17))
  if not pg then   -- and without schema 20's inbox.who, which the migration adds again
    H.sql(db, "PRAGMA user_version = 17")
    H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
  end
end

describe("a reuse an older mend wrote", function()
  after_each(H.cleanup)

  it("is not compensated by its run after the upgrade, and status says reused", function()
    local eng, log, db = R.engine()
    local a = R.start(eng, 3)
    eng:signal(a, "ok", true)
    eng:advance(1)
    local b = R.start(eng, 3)
    H.close(eng)
    as_older_mend(db)
    local eng2 = R.restart(db, log)
    eng2:run()   -- b times out and turns back
    assert.are.equal("compensated", eng2:status(b).status)
    assert.are.equal("succeeded", eng2:status(a).status)
    assert.are.same({}, log.refunds)
    local st = H.step(eng2:status(b), "charge")
    assert.is_true(st.reused)
    assert.is_nil(st.reused_from)   -- its owner was not recorded
    assert.is_nil(H.step(eng2:status(a), "charge").reused)
  end)

  it("is not offered once its owner undid the key", function()
    local eng, log, db = R.engine()
    local a = R.start(eng, 9)
    local b = R.start(eng, 9)
    eng:signal(b, "ok", true)
    eng:advance(1)
    eng:advance(10)   -- a times out and refunds
    assert.are.same({ a }, log.refunds)
    H.close(eng)
    as_older_mend(db)
    local eng2 = H.reopen(db)
    eng2:register(R.order_def(log))
    local c = R.start(eng2, 9)
    assert.are.equal(2, log.charges)   -- c charges again: b's row is a refunded charge's
    assert.is_nil(H.step(eng2:status(c), "charge").reused)
  end)
end)
