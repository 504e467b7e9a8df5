-- A run's row held locked by another session on PostgreSQL (`BEGIN; SELECT ... FOR UPDATE;` in
-- psql, left open): the commands that answer a person give up after a few seconds with an error
-- that names the lock, exit 1, and leave the run as it was, as they do on SQLite behind another
-- process's write lock; they waited for ever. Commands that need no lock on that row answer at
-- once. Needs the test cluster (MEND_TEST_PG); pending without it.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local json = require("mend").json

local q = H.quote
local mend_in = H.mend_in

local it_pg = H.PG and it or pending

-- A run that waits for an event (started, with no worker to carry it yet).
local WAIT = [[
return { name = "wait", steps = {
  { name = "a", execute = function() return 1 end, compensate = function() end },
  { name = "paid", wait_for = "payment", timeout = 3600 },
} }
]]

local holds = {}

-- A psql session that locks run id's row (FOR UPDATE) and keeps its transaction open; returns
-- once the lock is held.
local function hold_row(dir, db, id)
  local name = ("mend-hold-%d"):format(#holds + 1) .. dir:match("([%w_]+)$")
  local held = dir .. "/" .. name
  local script = H.write_file(dir, name .. ".sql", ("BEGIN;\nSELECT id FROM runs WHERE id = '%s' FOR UPDATE;\n"
    .. "\\! touch %s\nSELECT pg_sleep(60);\nCOMMIT;\n"):format(id, held))
  os.execute(("PGAPPNAME=%s psql -X -q %s -f %s >/dev/null 2>&1 &"):format(q(name), q(db), q(script)))
  holds[#holds + 1] = name
  H.wait_for("psql to hold the row", function() return H.shell("test -e " .. q(held)) == 0 end, 10)
end

local function release_all()
  for i = #holds, 1, -1 do
    H.sql(H.PG, ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '%s'")
      :format(holds[i]))
    holds[i] = nil
  end
end

local function gives_up(rc, out, err, what)
  assert.are.equal(1, rc, out .. err)
  assert.matches(what .. ": a row it needs is locked by another session %(waited 5%.0 s%)", err)
end

describe("a run's row locked by another PostgreSQL session", function()
  after_each(function()
    release_all()
    H.cleanup()
  end)

  it_pg("mend cancel gives up naming the lock, and the run is as it was", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "wait.lua", WAIT)
    local db = H.new_db(dir)
    local rc, out, err = mend_in(dir, db, "start wait --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local before = H.status_json(db, id)
    hold_row(dir, db, id)
    local t0 = H.wall()
    rc, out, err = mend_in(nil, db, "cancel " .. id)
    assert.is_true(H.wall() - t0 < 50, "it gave up")
    gives_up(rc, out, err, "take run")
    release_all()
    local st = H.status_json(db, id)
    assert.are.equal("running", st.status)
    assert.is_nil(st.cancel_requested)
    assert.are.same(before.steps, st.steps)
    assert.are.equal(before.updated, st.updated)
    -- a signal needs no lock on the row: it answers while the row is held
    hold_row(dir, db, id)
    rc, out, err = mend_in(nil, db, "signal " .. id .. " payment --data '{\"amount\":5}'")
    assert.are.equal(0, rc, out .. err)
    assert.matches("event payment sent", out)
  end)

  it_pg("mend dlq retry and mend dlq resolve give up naming the lock, and the dead letter stays", function()
    local dir, db = S.workspace()
    local id = S.dead_letter(dir, db)
    hold_row(dir, db, id)
    local rc, out, err = mend_in(dir, db, "dlq retry " .. id)
    gives_up(rc, out, err, "take run")
    rc, out, err = mend_in(nil, db, "dlq resolve " .. id .. " --note 'refunded by hand'")
    gives_up(rc, out, err, "update run")
    release_all()
    local _, list = mend_in(nil, db, "dlq --json")
    assert.are.equal(id, json.decode(list)[1].run_id)
    assert.are.equal("needs_attention", H.status_json(db, id).status)
    rc, out, err = mend_in(nil, db, "dlq resolve " .. id .. " --note 'refunded by hand'")
    assert.are.equal(0, rc, out .. err)
  end)
end)
