-- Who started a run and who sent an event are recorded, as a repair's who is: a start as a
-- `started` row "by WHO" of its run's history, an event with itself (inbox.who, SQLite
-- schema 20, PostgreSQL 10), from the Lua API (opts.who), the shell (`mend start --who`,
-- `mend signal --who`: user@host (mend cli)) and HTTP (spec/acceptance_http_repairs_spec.lua).
-- Not tagged #sqlite: these run on PostgreSQL too.
local H = require "spec.helper"

local WAITS = [[
return { name = "waits", steps = {
  { name = "approve", wait_for = "go", timeout = 60 },
  { name = "note", wait_for = "note", timeout = 60 },
} }
]]

local function register(eng)
  eng:register{ name = "waits", steps = {
    { name = "approve", wait_for = "go", timeout = 60 },
    { name = "note", wait_for = "note", timeout = 60 },
  } }
end

-- The details of the `started` rows of run id's history, and whether any `operator` row (a
-- repair's) is there too.
local function started_rows(eng, id)
  local out, repairs = {}, false
  for _, h in ipairs(eng:history(id)) do
    if h.event == "started" then out[#out + 1] = h.detail end
    repairs = repairs or h.event == "operator"
  end
  return out, repairs
end

-- name|who of each event of run id, in order ("" for none).
local function inbox(db, id)
  return H.sql(db, ("SELECT name, coalesce(who, '') FROM inbox WHERE run_id = '%s' ORDER BY seq"):format(id))
end

describe("who started a run and who sent an event", function()
  after_each(H.cleanup)

  it("are recorded from the Lua API when told, and nothing when not", function()
    local eng, db = H.new_engine()
    register(eng)
    local a = eng:start("waits", {}, { who = "ana" })
    local b = eng:start("waits", {})
    assert.are.same({ { "by ana" }, false }, { started_rows(eng, a) })
    assert.are.same({}, (started_rows(eng, b)))
    assert.are.equal("sent", (eng:signal(a, "go", 1, { who = "bob" })))
    assert.are.equal("sent", (eng:signal(a, "note", 2)))
    eng:run()
    assert.are.equal("succeeded", eng:status(a).status)
    assert.are.same({ "go|bob", "note|" }, inbox(db, a))
    assert.has_error(function() eng:signal(b, "go", 1, { whom = "x" }) end)
  end)

  it("are the user and host of `mend start` and `mend signal`, with --who in front", function()
    local eng, db = H.new_engine()
    H.close(eng)
    local dir = H.tmp_dir()
    local file = H.write_file(dir, "waits.lua", WAITS)
    local rc, out = H.shell(("%s start %s --db %s --who ann"):format(H.quote(H.MEND), H.quote(file), H.quote(db)))
    assert.are.equal(0, rc, out)
    local id = out:match("(%w+)%s*$")
    rc, out = H.shell(("%s signal %s go --who bob --db %s"):format(H.quote(H.MEND), id, H.quote(db)))
    assert.are.equal(0, rc, out)
    rc, out = H.shell(("%s signal %s note --db %s"):format(H.quote(H.MEND), id, H.quote(db)))
    assert.are.equal(0, rc, out)
    local me = "[^ ]+@[^ ]+ %(mend cli%)"
    local eng2 = H.reopen(db)
    local rows = started_rows(eng2, id)
    assert.are.equal(1, #rows)
    assert.is_truthy(rows[1]:match("^by ann via " .. me .. "$"), rows[1])
    -- the timeline prints it as the run's other rows, in the (run) column
    rc, out = H.shell(("%s history %s --db %s"):format(H.quote(H.MEND), id, H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:match("\n  %+[%d.]+s +%(run%) +started by ann via " .. me .. "\n"), out)
    local events = inbox(db, id)
    assert.is_truthy(events[1]:match("^go|bob via " .. me .. "$"), events[1])
    assert.is_truthy(events[2]:match("^note|" .. me .. "$"), events[2])
    rc, out = H.shell(("%s signal %s note --who '' --db %s"):format(H.quote(H.MEND), id, H.quote(db)))
    assert.are.equal(2, rc, out)
  end)

  it("has its column added to a database the release before left; its events read none", function()
    local eng, db = H.new_engine()
    register(eng)
    local a = eng:start("waits", {})
    eng:signal(a, "go", 1, { who = "bob" })
    H.close(eng)
    local pg = H.is_pg(db)
    H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 9 or 19))
    if not pg then H.sql(db, "PRAGMA user_version = 19") end
    local eng2 = H.reopen(db)
    register(eng2)
    assert.are.same({ pg and "10" or "21" }, H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    eng2:signal(a, "note", 2, { who = "cy" })
    assert.are.same({ "go|", "note|cy" }, inbox(db, a))
  end)
end)
