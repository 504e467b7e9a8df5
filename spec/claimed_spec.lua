-- A worker's take of a run says whether another process had begun it: `claimed` ("claimed
-- by worker W, version V") when none had (a run started for any worker to take: `mend serve`,
-- `mend start`, a detached eng:start; or one whose starter gave it back or died before its
-- first step), `recovered` when one had (its worker died, its lease ran out, it gave the run
-- back). A SQLite file of schema 20 gets the new event's label
-- (schema 21) and reads its rows as before. Not tagged #sqlite but the upgrade: these run on
-- PostgreSQL too.
local H = require "spec.helper"

-- Its first attempt of `first` waits half a minute when the input says hold: a worker killed
-- then dies mid-step; the attempt after returns at once.
local TAKEN = [[
local mend = require "mend"
return { name = "taken", steps = {
  { name = "first", execute = function(ctx, input)
      if input.hold and ctx.attempt == 1 then mend.sleep(30) end
      return 1
    end },
  { name = "second", wait_for = "go" },
} }
]]

-- The `claimed` and `recovered` rows of run id, in order: { event, worker, detail }.
local function takes(eng, id)
  local out = {}
  for _, h in ipairs(eng:history(id)) do
    if h.event == "claimed" or h.event == "recovered" then
      out[#out + 1] = { h.event, h.worker, h.detail }
    end
  end
  return out
end

-- A worker engine on db that takes what it can, once it can (a dead worker's lease goes with
-- its process, or when it runs out); how many it took.
local function take(db, file)
  local w = H.reopen(db)
  w:load(file)
  local n = 0
  H.wait_for("a run to take", function() n = n + w:recover(); return n > 0 end, 20)
  return w, n
end

-- A directory holding the workflow's file, and an engine on a new database that loaded it.
local function loaded()
  local dir = H.tmp_dir()
  local file = H.write_file(dir, "taken.lua", TAKEN)
  local eng, db = H.new_engine()
  eng:load(file)
  return dir, file, eng, db
end

-- `mend history id` as a person reads it.
local function timeline(db, id)
  local rc, out = H.mend_cmd(db, "history " .. id)
  assert.are.equal(0, rc, out)
  return out
end

describe("a worker's take of a run", function()
  after_each(H.cleanup)

  it("is `claimed` when no process held the run before, and none when its starter runs it",
     function()
    local _, file, client, db = loaded()
    local id = client:start("taken", {}, { detached = true })
    H.close(client)
    local w, n = take(db, file)
    assert.are.equal(1, n)
    w:run()
    assert.are.equal("waiting", w:status(id).steps[2].status)
    local t = takes(w, id)
    assert.are.equal(1, #t)
    assert.are.equal("claimed", t[1][1])
    assert.is_truthy(t[1][3]:find(", version " .. w:status(id).version, 1, true), t[1][3])
    local out = timeline(db, id)
    assert.is_truthy(out:find("claimed by worker " .. t[1][3], 1, true), out)
    assert.is_nil(out:find("recovered", 1, true), out)
    -- a run its own engine starts is that engine's from its first row: no take
    local own = w:start("taken", {})
    w:run()
    assert.are.same({}, takes(w, own))
  end)

  it("is `claimed`, then `recovered` by the next worker when the first is killed mid-step",
     function()
    local dir, file, client, db = loaded()
    local id = client:start("taken", { hold = true }, { detached = true })
    local log = H.tmp_dir() .. "/worker.log"
    local pid = H.start_worker(db, dir, log, "--lease 0.5 --poll 0.01")
    local killed = false
    finally(function() if not killed then os.execute("kill -9 " .. pid .. " 2>/dev/null") end end)
    H.wait_for("its first attempt to begin", function()
      return #H.events(client, id, { event = "step", step = "first", to = "running" }) > 0
    end, 20)
    os.execute("kill -9 " .. pid)
    killed = true
    local w = take(db, file)
    w:run()
    local st = w:status(id)
    assert.are.equal("succeeded", st.steps[1].status)
    assert.are.equal(2, st.steps[1].attempts)
    local t = takes(w, id)
    assert.are.same({ "claimed", "recovered" }, { t[1][1], t[2] and t[2][1] })
    assert.are.equal(2, #t)
    assert.are_not.equal(t[1][2], t[2][2])   -- two workers
    local out = timeline(db, id)
    local a = out:find("claimed by worker " .. t[1][3], 1, true)
    local b = out:find("recovered by worker " .. t[2][3], 1, true)
    assert.is_truthy(a and b and a < b, out)
  end)

  -- A run its own engine started is held from its first row (runs.owner), before its first
  -- step's row is written: given back then, or its process dead, nothing of it was begun, and
  -- its first take is a claim, not a recovery.
  it("is `claimed` when its starter gave it back before its first step", function()
    local _, file, eng, db = loaded()
    local id = eng:start("taken", {})
    H.close(eng)
    local w = take(db, file)
    local t = takes(w, id)
    assert.are.same({ "claimed" }, { t[1] and t[1][1] })
  end)

  it("is `claimed` when its starter died holding it before its first step", function()
    local dir = H.tmp_dir()
    local file = H.write_file(dir, "taken.lua", TAKEN)
    local db = H.new_db()
    -- the start is made durable by the next one's commit; the process then dies, holding it
    local script = H.write_file(dir, "starter.lua", ([[
local mend = require "mend"
local eng = mend.engine { db = %q, lease = 1 }
eng:load(%q)
local id = eng:start("taken", {})
eng:start("taken", {}, { detached = true })
io.write(id)
os.exit(0, false)
]]):format(db, file))
    local p = assert(io.popen("lua5.4 " .. H.quote(script)))
    local out = p:read("a")
    p:close()
    local id = out:match("^(%S+)")
    assert.is_truthy(id, out)
    local held = H.sql(db, ("SELECT count(*) FROM runs WHERE id = '%s' AND owner IS NOT NULL")
      :format(id))
    assert.are.same({ "1" }, held)   -- its starter's, which is gone
    local w = H.reopen(db, { clock = "real" })
    w:load(file)
    H.wait_for("its run to be taken", function() w:recover(); return #takes(w, id) > 0 end, 20)
    assert.are.same({ "claimed" }, { takes(w, id)[1][1] })
  end)

  it("reads a file of schema 20 as before, and records its claims there as codes #sqlite",
     function()
    local _, file, eng, db = loaded()
    -- held by its starter, then taken again by the next engine: a `recovered` row
    local held = eng:start("taken", {})
    eng:run()
    H.close(eng)
    local w = take(db, file)
    H.close(w)
    -- one only recorded, then the file as a mend of schema 20 left it (no `claimed` label)
    local client = H.reopen(db)
    client:load(file)
    local free = client:start("taken", {}, { detached = true })
    H.close(client)
    H.sql(db, "DELETE FROM labels WHERE name = 'claimed'")
    H.sql(db, "UPDATE meta SET value = '20' WHERE key = 'schema_version'")
    H.sql(db, "PRAGMA user_version = 20")
    local rows = "SELECT seq || ' ' || event FROM history WHERE run_id = '%s' AND seq <= %d"
      .. " ORDER BY seq"
    local before = H.sql(db, rows:format(held, 1e9))
    local w2 = take(db, file)
    assert.are.same({ "21" }, H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    assert.are.same({ "21" }, H.sql(db, "PRAGMA user_version"))
    assert.are.same({ "claimed" }, H.sql(db, "SELECT name FROM labels WHERE code = 31"))
    -- the rows before are as they were, and read so; taken again, it is recovered again
    assert.are.same(before, H.sql(db, rows:format(held, #before)))
    local t = takes(w2, held)
    assert.are.same({ "recovered", "recovered" }, { t[1] and t[1][1], t[2] and t[2][1] })
    assert.is_truthy(timeline(db, held):find("recovered by worker", 1, true))
    -- the new claim: a code, read as its name
    assert.are.same({ "claimed" }, { (takes(w2, free)[1] or {})[1] })
    assert.are.same({ "1" }, H.sql(db, ("SELECT count(*) FROM history WHERE run_id = '%s'"
      .. " AND event = 31"):format(free)))
    assert.is_truthy(timeline(db, free):find("claimed by worker", 1, true))
  end)
end)
