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
    if not pg then H.sql(db, "PRAGMA user_version = 16") end
    H.close(H.reopen(db, {}))
    assert.are.equal("off", mark_of(db))
    assert.are.same({ pg and "8" or "18" }, H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    -- and a marked database stays marked through it
    H.close(H.reopen(db, { sandbox = true }))
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 6 or 16))
    if not pg then H.sql(db, "PRAGMA user_version = 16") end
    H.close(H.reopen(db, { sandbox = true }))
    assert.are.equal("on", mark_of(db))
  end)
end)
