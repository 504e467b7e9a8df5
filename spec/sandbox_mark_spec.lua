-- The database's sandbox mark (meta.sandbox, SQLite schema 17, PostgreSQL schema 7): a
-- sandboxed engine opening a database marks it, and from then on every engine that opens it
-- (mend.engine{}, the C API, every command) runs the workflows' code sandboxed unless the host
-- says no_sandbox (--no-sandbox): the repair commands, the REPL and a worker started without
-- --sandbox ran the untrusted code of a sandboxed worker's runs with io and os.
local H = require "spec.helper"
local mend = require "mend"

-- A workflow whose top level and step say whether io is there.
local PROBE = [[
local has_io = io ~= nil
return { name = "probe", steps = { { name = "s", execute = function() return { top = has_io, step = io ~= nil } end } } }
]]

local function mark_of(db)
  return H.sql(db, "SELECT value FROM meta WHERE key = 'sandbox'")[1]
end

local function probe(eng, dir)
  eng:load(H.write_file(dir, "probe.lua", PROBE))
  local id = eng:start("probe", {})
  eng:run()
  return eng:status(id).steps[1].result
end

-- The step's result in the status `mend run --json` prints last.
local function result_of(out)
  return mend.json.decode(out:match("(%b{})%s*$")).steps[1].result
end

describe("the sandbox mark", function()
  after_each(H.cleanup)

  it("is set by a sandboxed engine, and sandboxes every engine that opens the database after", function()
    local dir = H.tmp_dir()
    local eng, db = H.new_engine({ clock = "virtual" })
    assert.are.same({ top = true, step = true }, probe(eng, dir))
    H.close(eng)
    assert.are.equal("off", mark_of(db))
    eng = H.reopen(db, { clock = "virtual", sandbox = true })
    assert.are.same({ top = false, step = false }, probe(eng, dir))
    H.close(eng)
    assert.are.equal("on", mark_of(db))
    -- opened as before, without sandbox: sandboxed all the same
    eng = H.reopen(db, { clock = "virtual" })
    assert.are.same({ top = false, step = false }, probe(eng, dir))
    H.close(eng)
    -- the host says so: unsandboxed, the mark kept
    eng = H.reopen(db, { clock = "virtual", no_sandbox = true })
    assert.are.same({ top = true, step = true }, probe(eng, dir))
    H.close(eng)
    assert.are.equal("on", mark_of(db))
    assert.has_error(function() mend.engine { db = db, sandbox = true, no_sandbox = true } end,
                     "mend.engine: sandbox and no_sandbox: give one of them")
  end)

  it("sandboxes mend run on a marked database unless given --no-sandbox, said on stderr", function()
    local dir = H.tmp_dir()
    local db = H.new_db()
    local file = H.write_file(dir, "probe.lua", PROBE)
    local eng = H.reopen(db, { sandbox = true })
    H.close(eng)
    local rc, out = H.shell(("%s run %s --db %s --clock virtual --json 2>&1"):format(H.MEND, H.quote(file), H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.are.same({ top = false, step = false }, result_of(out))
    rc, out = H.shell(("%s run %s --db %s --clock virtual --json --no-sandbox 2>&1"):format(H.MEND, H.quote(file), H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.are.same({ top = true, step = true }, result_of(out))
    assert.matches("--no-sandbox: the workflows' code runs unsandboxed", out, 1, true)
    rc, out = H.shell(("%s run %s --db %s --sandbox --no-sandbox 2>&1"):format(H.MEND, H.quote(file), H.quote(db)))
    assert.are.equal(2, rc, out)
  end)

  -- #sqlite: the copy's source is a SQLite file, the target this run's PostgreSQL store
  local it_pg = H.PG and it or pending
  it_pg("goes with the workflows through mend copy to PostgreSQL", function()
    local src = H.tmp_db()
    H.close(H.reopen(src, { sandbox = true }))
    local to = H.new_db()
    local rc, out = H.shell(("%s copy --from %s --to %s 2>&1"):format(H.MEND, H.quote(src), H.quote(to)))
    assert.are.equal(0, rc, out)
    assert.are.equal("on", mark_of(to))
    local eng = H.reopen(to, { clock = "virtual" })
    assert.are.same({ top = false, step = false }, probe(eng, H.tmp_dir()))
  end)

  it("is added as off by the migration to a database of the schema before", function()
    local db = H.new_db()
    local pg = H.is_pg(db)
    H.close(H.reopen(db, {}))
    H.sql(db, "DELETE FROM meta WHERE key = 'sandbox'")
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 6 or 16))
    if not pg then   -- and without schema 20's inbox.who, which the migration adds again
      H.sql(db, "PRAGMA user_version = 16")
      H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    end
    H.close(H.reopen(db, {}))
    assert.are.equal("off", mark_of(db))
    assert.are.same({ pg and "10" or "21" }, H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    -- and a marked database stays marked through it
    H.close(H.reopen(db, { sandbox = true }))
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 6 or 16))
    if not pg then   -- and without schema 20's inbox.who, which the migration adds again
      H.sql(db, "PRAGMA user_version = 16")
      H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    end
    H.close(H.reopen(db, { sandbox = true }))
    assert.are.equal("on", mark_of(db))
  end)
end)

describe("the sandbox mark, set after an engine opened", function()
  after_each(H.cleanup)

  -- An engine opened before a sandboxed one marked the database (a worker, mend serve) takes
  -- the sandboxed engine's runs and loads their scripts from the store: it refuses to run them
  -- unsandboxed, and says why.
  it("keeps an engine opened before the mark from running stored code unsandboxed", function()
    local db = H.new_db()
    local host = H.reopen(db, {})             -- opened first, no sandbox asked, no mark yet
    local sb = H.reopen(db, { sandbox = true })
    sb:load(H.write_file(H.tmp_dir(), "probe.lua", PROBE))
    local id = sb:start("probe", {})
    H.close(sb)
    assert.are.equal("on", mark_of(db))
    local ok, err = pcall(function()
      host:resume(id)
      host:run()
    end)
    local st = host:status(id)
    H.close(host)
    assert.are_not.same({ top = true, step = true }, st.steps[1].result)
    local said = tostring(err) .. " " .. tostring(st.steps[1].error) .. " " .. tostring(st.error)
    assert.is_false(ok and st.steps[1].result ~= nil, said)
    assert.matches("marked sandboxed after this engine opened", said, 1, true)
    -- opened again, it is sandboxed by the mark and runs the run
    local eng = H.reopen(db, {})
    eng:resume(id)
    eng:run()
    assert.are.same({ top = false, step = false }, eng:status(id).steps[1].result)
  end)
end)

describe("an engine the sandbox mark made sandboxed", function()
  after_each(H.cleanup)

  it("says so as it opens, naming the database and how to open it trusted", function()
    local db = H.new_db()
    H.close(H.reopen(db, { sandbox = true }))
    local lines = {}
    local eng = H.reopen(db, { log = function(r) lines[#lines + 1] = r end })
    H.close(eng)
    local said
    for _, r in ipairs(lines) do
      if r.event == "sandbox" and r.level == "warn" then said = r.message end
    end
    assert.is_truthy(said, "no warn line")
    assert.matches("is marked sandboxed", said, 1, true)
    assert.matches("no_sandbox", said, 1, true)
    assert.matches("mend db trust", said, 1, true)
  end)

  -- The line an engine logs as it is made reached a log function through mend_engine_lua of
  -- an engine not made yet: a crash, the no_sandbox warn line's too.
  it("gives the lines it logs as it opens to a log function", function()
    local db = H.new_db()
    H.close(H.reopen(db, { sandbox = true }))
    local events = {}
    local function log(r) events[#events + 1] = r.level .. " " .. r.event end
    H.close(H.reopen(db, { no_sandbox = true, log = log }))
    H.close(H.reopen(db, { log = log }))
    assert.are.same({ "warn sandbox", "warn sandbox" }, events)
  end)

  it("names the mark in mend.http's refusal of a host", function()
    local db = H.new_db()
    H.close(H.reopen(db, { sandbox = true }))
    local eng = H.reopen(db, { clock = "virtual", log = false })
    eng:load(H.write_file(H.tmp_dir(), "h.lua", [[
local mend = require "mend"
return { name = "h", steps = { { name = "s", retry = { max_attempts = 1 }, execute = function()
  return { st = mend.http{ url = "http://payments.internal/x" }.status } end } } }
]]))
    local id = eng:start("h", {})
    eng:run()
    local e = eng:status(id).steps[1].error
    assert.matches("not allowed (http_allow: none)", e, 1, true)
    assert.matches("sandboxed because the database is marked sandboxed", e, 1, true)
  end)
end)

describe("mend.trust_db", function()
  after_each(H.cleanup)

  it("clears the mark: the host's engines run the code unsandboxed again", function()
    local dir = H.tmp_dir()
    local db = H.new_db()
    H.close(H.reopen(db, {}))
    assert.are.equal("unmarked", mend.trust_db(db))
    H.close(H.reopen(db, { sandbox = true }))
    assert.are.equal("cleared", mend.trust_db(db))
    assert.are.equal("off", mark_of(db))
    local eng = H.reopen(db, { clock = "virtual" })
    assert.are.same({ top = true, step = true }, probe(eng, dir))
    H.close(eng)
    assert.has_error(function() mend.trust_db("a\0b") end)
  end)
end)
