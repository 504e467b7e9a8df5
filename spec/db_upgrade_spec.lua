-- mend db upgrade (schema 16): a SQLite file made before schema 16 keeps run_key's UNIQUE
-- column (layout `column`) when this mend opens it, since a mend of schema 15 still running on
-- it would not survive the change; the command makes it the partial index a new file has, on
-- purpose: refused while a worker's lease lasts, every run, key and order kept.
local H = require "spec.helper"

local MEND, q, sh = H.MEND, H.quote, H.shell

local OK = [[return { name = "ok", steps = { { name = "a", execute = function() return 1 end } } }]]

local function layout(db)
  return H.sql(db, "SELECT value FROM meta WHERE key = 'runs_key_layout'")[1]
end
local function rows(db)
  return H.sql(db, "SELECT group_concat(id || ':' || coalesce(run_key, '-'), ' ')"
                   .. " FROM (SELECT id, run_key FROM runs ORDER BY rowid)")[1]
end

local function run(dir, db, key)
  local rc, out = sh(MEND .. " run " .. q(dir .. "/ok.lua") .. " --clock virtual --db " .. q(db)
                     .. (key and (" --key " .. key) or "") .. " 2>&1")
  return rc, out
end


describe("mend db upgrade #sqlite", function()
  after_each(H.cleanup)

  it("has nothing to do on a new file: its run keys are a partial index from birth", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "ok.lua", OK)
    local db = dir .. "/new.db"
    assert.are.equal(0, (run(dir, db, "k1")))
    assert.are.equal("partial", layout(db))
    local rc, out = H.mend_cmd(db, "db upgrade")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("partial index already", 1, true), out)
  end)

  -- An empty file (a path mistyped, a file made by touch) was given mend's whole schema and
  -- called current; db trust named mend's own Lua line in its refusal of it.
  it("makes no schema in an empty file, as db trust makes none, and names no line of mend's",
     function()
    local dir = H.tmp_dir()
    local empty = H.write_file(dir, "empty.db", "")
    for _, cmd in ipairs { "db upgrade", "db trust" } do
      local rc, out = H.mend_cmd(empty, cmd)
      assert.are.equal(1, rc, out)
      assert.are.equal("mend: " .. empty .. ": no mend database there (no mend schema)\n", out)
      assert.are.equal("", H.read(empty), cmd)
    end
    -- a file: URI's file is the one SQLite opens, its %20 a space
    H.write_file(dir, "ok.lua", OK)
    assert.are.equal(0, (run(dir, dir .. "/a b.db")))
    local rc, out = H.mend_cmd("file:" .. dir .. "/a%20b.db", "db upgrade")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("partial index already", 1, true), out)
  end)

  it("is refused while a worker's lease lasts; then keeps every run and key, in order", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "ok.lua", OK)
    local db = dir .. "/old.db"
    local rc, out = run(dir, db, "k1")
    assert.are.equal(0, rc, out)
    local k1 = H.sql(db, "SELECT id FROM runs WHERE run_key = 'k1'")[1]
    assert.are.equal(0, (run(dir, db)))
    assert.are.equal(0, (run(dir, db, "k2")))
    H.runs_key_column(db)
    assert.are.equal("column", layout(db))
    local before = rows(db)

    -- a key is still taken and found in the column's layout
    rc, out = run(dir, db, "k1")
    assert.are.equal(0, rc, out)   -- the existing run's outcome
    assert.truthy(out:find("names the existing run " .. k1, 1, true), out)

    local log = dir .. "/worker.log"
    local pid = H.spawn_worker(db, dir, log)
    H.wait_for("the worker's lease", function()
      return H.sql(db, "SELECT count(*) FROM workers")[1] ~= "0"
    end, 10)
    rc, out = H.mend_cmd(db, "db upgrade")
    H.stop_worker(pid)
    assert.are.equal(1, rc, out)
    assert.truthy(out:find("its lease lasts", 1, true), out)
    assert.truthy(out:find("stop every mend running on the file first", 1, true), out)
    assert.truthy(out:find("--despite-leases", 1, true), out)
    assert.are.equal("column", layout(db))

    rc, out = H.mend_cmd(db, "db upgrade")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("partial index now", 1, true), out)
    assert.are.equal("partial", layout(db))
    assert.are.equal(before, rows(db))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'runs'"
                                       .. " AND name LIKE 'sqlite_autoindex_%'"))
    assert.are.same({ "ok" }, H.sql(db, "PRAGMA integrity_check"))
    rc, out = run(dir, db, "k1")
    assert.are.equal(0, rc, out)   -- the existing run's outcome
    assert.truthy(out:find("names the existing run " .. k1, 1, true), out)
    assert.are.equal(0, (run(dir, db, "k3")))
    rc, out = H.mend_cmd(db, "db upgrade")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("partial index already", 1, true), out)
  end)

  -- The rebuild drops runs and makes it again; what an operator made on
  -- runs (an index for a query of theirs, a trigger, a view) is part of the file too.
  local function column_file(dir)
    H.write_file(dir, "ok.lua", OK)
    local db = dir .. "/old.db"
    assert.are.equal(0, (run(dir, db, "k1")))
    assert.are.equal(0, (run(dir, db)))
    H.runs_key_column(db)
    assert.are.equal("column", layout(db))
    return db
  end

  it("keeps an index and a trigger an operator made on runs", function()
    local db = column_file(H.tmp_dir())
    H.sql(db, "CREATE INDEX ops_by_workflow ON runs(workflow, status);"
              .. " CREATE TABLE ops_done(id TEXT);"
              .. " CREATE TRIGGER ops_runs_done AFTER UPDATE OF status ON runs"
              .. " BEGIN INSERT INTO ops_done VALUES(new.id); END;")
    local rc, out = H.mend_cmd(db, "db upgrade")
    assert.are.equal(0, rc, out)
    assert.are.equal("partial", layout(db))
    assert.are.same({ "ops_by_workflow", "ops_runs_done" },
                    H.sql(db, "SELECT name FROM sqlite_master WHERE name LIKE 'ops_%'"
                              .. " AND tbl_name = 'runs' ORDER BY name"))
  end)

  it("goes through a view an operator made on runs, which still reads", function()
    local db = column_file(H.tmp_dir())
    H.sql(db, "CREATE VIEW ops_keyed AS SELECT id, run_key FROM runs WHERE run_key IS NOT NULL")
    local rc, out = H.mend_cmd(db, "db upgrade")
    -- on schema16: exit 1, "error in view ops_keyed: no such table: main.runs"
    assert.are.equal(0, rc, out)
    assert.falsy(out:find("no such table", 1, true), out)
    assert.are.equal("partial", layout(db))
    assert.are.same({ "k1" }, H.sql(db, "SELECT run_key FROM ops_keyed"))
  end)

  it("names no password of a PostgreSQL URI, nor calls a server it never reached current", function()
    -- nothing listens on port 1: this mend never saw that database
    local rc, out = H.shell(MEND .. " db upgrade --db "
                            .. q("postgres://bob:s3cret-pw@127.0.0.1:1/nodb"))
    assert.falsy(out:find("s3cret-pw", 1, true), out)
    assert.are_not.equal(0, rc, out)
    assert.falsy(out:find("partial index already", 1, true), out)
  end)

  it("names what it wants when given no command or another", function()
    local rc, out = sh(MEND .. " db")
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("mend db upgrade", 1, true), out)
    rc, out = sh(MEND .. " db vacuum")
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("unknown db command vacuum", 1, true), out)
  end)
end)
