-- mend.db_where promises "where the database a name opens is, read as its
-- backend reads it" (docs/lua-api.md), and the read-only commands and mend.trust_db rely on it to
-- make no database. Each case here is checked against SQLite itself (sqlite3_open_v2 with
-- SQLITE_OPEN_URI, as mend opens every SQLite name), in a directory of its own: what file, if
-- any, SQLite opened.
local H = require "spec.helper"
local mend = require "mend"

local OPENER = [[
#include <sqlite3.h>
#include <stdio.h>
int main(int argc, char **argv) {
  sqlite3 *db = NULL;
  if (argc < 2) return 2;
  int rc = sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                           SQLITE_OPEN_URI, NULL);
  if (rc != SQLITE_OK) { printf("error"); return 0; }
  const char *f = sqlite3_db_filename(db, "main");
  printf("%s", f && *f ? f : "memory");
  sqlite3_close(db);
  return 0;
}
]]

describe("mend.db_where against SQLite #sqlite", function()
  after_each(H.cleanup)

  it("names the file SQLite opens for every file: URI", function()
    local dir = H.tmp_dir()
    local exe = dir .. "/opener"
    if H.shell(("cc -o %s %s -lsqlite3"):format(exe, H.write_file(dir, "o.c", OPENER))) ~= 0 then
      pending("no C compiler or sqlite3 headers")
      return
    end
    local wrong = {}
    for i, name in ipairs {
      "file:a%20b.db",                      -- the branch's own cases: these agree
      "file:x.db?cache=shared&mode=memory",
      "file:ab% 41.db",                     -- '%' then a space: sscanf's %1x skips the space
      "file:x.db?mode=memory&mode=rwc",     -- the last mode= is SQLite's
      "file:y.db?mode=%6Demory",            -- a query's escapes are decoded too
      "file:w.db?%6Dode=memory",
      "file:%00x.db",                       -- SQLite drops a path from its %00: a temporary db
    } do
      local sub = dir .. "/c" .. i
      assert(os.execute("mkdir " .. H.quote(sub)))
      local _, said = H.shell(("cd %s && %s %s"):format(H.quote(sub), exe, H.quote(name)))
      local kind, file = mend.db_where(name)
      local ours = kind == "memory" and "memory"
                   or kind == "file" and (file:sub(1, 1) == "/" and file or sub .. "/" .. file)
                   or kind
      if said ~= "error" and ours ~= said then
        wrong[#wrong + 1] = ("%s: db_where %s, SQLite opened %s"):format(name, ours, said)
      end
    end
    assert.are.same({}, wrong)
  end)

  -- what the wrong answer costs: the read-only command's check (base.lua existing_db) passes a
  -- name it takes for memory, and SQLite makes the file with mend's whole schema there
  it("makes no database at a read-only command's file: URI SQLite opens as a file", function()
    local dir = H.tmp_dir()
    local rc, out = H.shell(("cd %s && %s status r1 --db %s 2>&1"):format(
      H.quote(dir), H.MEND, H.quote("file:x.db?mode=memory&mode=rwc")))
    assert.are.equal(1, rc, out)
    local made = io.open(dir .. "/x.db", "rb")
    if made then made:close() end
    assert.is_nil(made, "mend status made x.db: " .. out)
  end)

  -- mend.trust_db checks access() on db_where's file ("abA1.db", there) and then opens the name,
  -- which SQLite reads as "ab% 41.db": an empty file is made where there was none
  it("makes no file at mend.trust_db of a name whose escape db_where misreads", function()
    local dir = H.tmp_dir()
    H.close(H.reopen(dir .. "/abA1.db", {}))
    pcall(mend.trust_db, "file:" .. dir .. "/ab% 41.db")
    local made = io.open(dir .. "/ab% 41.db", "rb")
    if made then made:close() end
    assert.is_nil(made, "mend.trust_db made an empty 'ab% 41.db'")
  end)

  -- an open that failed was explained by the name's text: "file:/tmp/x" is no folder, and a
  -- URI of a folder read "its folder file:/tmp does not exist"
  it("explains an open that failed by the file a file: URI names", function()
    local dir = H.tmp_dir()
    assert(os.execute("mkdir " .. H.quote(dir .. "/d.db")))
    local wf = H.write_file(dir, "w.lua", "return { name = 'w', steps = { { name = 'a', " ..
                                          "execute = function() return 1 end } } }")
    local rc, out = H.shell(("%s run %s --db %s 2>&1"):format(H.MEND, H.quote(wf),
                                                               H.quote("file:" .. dir .. "/d.db")))
    assert.are.equal(1, rc, out)
    assert.are.equal("mend: file:" .. dir .. "/d.db: cannot open: unable to open database file " ..
                     "(it is a folder: a database is a file; give a path in it, as " .. dir ..
                     "/d.db/mend.db)\n", out)
    rc, out = H.shell(("%s run %s --db %s 2>&1"):format(H.MEND, H.quote(wf),
                                                         H.quote("file:" .. dir .. "/no/x.db")))
    assert.are.equal(1, rc, out)
    assert.matches("(its folder " .. dir .. "/no does not exist)", out, 1, true)
  end)
end)

-- The same promise on PostgreSQL: a read-only command makes no schema in an empty database
-- (base.lua's existing_db asks mend.db_mark, which makes nothing).
describe("a read-only command on an empty PostgreSQL database", function()
  after_each(H.cleanup)

  it("makes no schema there", function()
    local db = H.new_db()
    if not H.is_pg(db) then return end
    local tables = "SELECT count(*) FROM information_schema.tables "
                   .. "WHERE table_schema = current_schema()"
    local rc, out = H.shell(("%s status r1 --db %s 2>&1"):format(H.MEND, H.quote(db)))
    assert.are.equal(1, rc, out)
    assert.are.equal("0", H.sql(db, tables)[1], "mend status made mend's schema: " .. out)
  end)
end)
