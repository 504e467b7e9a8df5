-- Where a database name's database is (mend.db_where: storage.c, mend_store_where), the one
-- reader of a name that mend.trust_db, the read-only commands' check that a database is there,
-- and --memory-limit's look at the mark (mend.db_mark) all use: a "file:" URI's file as SQLite
-- opens it (escapes decoded, its authority and query apart), a file whose name begins with
-- "postgres" a file. The commands read it apart before: a "file:" URI was never checked, and
-- "postgres_x.db" was taken for PostgreSQL, so a read-only command made either file.
local H = require "spec.helper"
local mend = require "mend"

describe("where a database name's database is", function()
  after_each(H.cleanup)

  it("reads a name as its backend does", function()
    for _, case in ipairs {
      { "file:a%20b.db", "file", "a b.db" },
      { "file:/d/a%20b.db?cache=shared#x", "file", "/d/a b.db" },
      { "file:///d/x.db", "file", "/d/x.db" },
      { "file://localhost/d/x.db", "file", "/d/x.db" },
      { "postgres_x.db", "file", "postgres_x.db" },
      { "postgresql://u@h/db", "postgres" },
      { "postgres://h/db", "postgres" },
      { ":memory:", "memory" },
      { "file::memory:", "memory" },
      { "file:x.db?cache=shared&mode=memory", "memory" },
      { "", "memory" },
    } do
      assert.are.same({ case[2], case[3] }, { mend.db_where(case[1]) }, case[1])
    end
  end)

  it("finds no database at a file: URI's file or a file named postgres_*, and makes none", function()
    local dir = H.tmp_dir()
    for _, case in ipairs { { "file:a%20b.db", dir .. "/a b.db" },
                            { "postgres_x.db", dir .. "/postgres_x.db" } } do
      local cmd = ("cd %s && %s status r1 --db %s 2>&1"):format(H.quote(dir), H.MEND,
                                                               H.quote(case[1]))
      local rc, out = H.shell(cmd)
      assert.are.equal(1, rc, out)
      assert.matches("no database " .. case[1], out, 1, true)
      local made = io.open(case[2], "rb")
      if made then made:close() end
      assert.is_nil(made, "a read-only command made " .. case[2])
      -- there, the command reads it
      H.close(H.reopen(case[2], {}))
      rc, out = H.shell(cmd)
      assert.are.equal(1, rc, out)
      assert.matches("no run r1", out, 1, true)
    end
  end)

  -- an empty file (touched, or left by a copy that failed) is no database either, as
  -- mend.engine{existing = true} takes it: a command that reads writes no schema into it
  it("finds no database in an empty file, and makes none there", function()
    local dir = H.tmp_dir()
    local empty = H.write_file(dir, "empty.db", "")
    for _, args in ipairs { "status r1", "history r1", "runs", "dlq", "breakers" } do
      local rc, out = H.shell(("%s %s --db %s"):format(H.MEND, args, H.quote(empty)))
      assert.are.equal(1, rc, out)
      assert.matches(": no mend database there", out, 1, true)
      assert.are.equal(0, H.shell(("test ! -s %s"):format(H.quote(empty))), args)
    end
  end)

  -- opening a named pipe blocks until a writer comes: the commands hung in their check
  it("refuses a named pipe or a folder as a database, by name or a file: URI, at once", function()
    local dir = H.tmp_dir()
    assert.are.equal(0, H.shell(("mkfifo %s/pipe.db && mkdir %s/dir.db"):format(H.quote(dir),
                                                                            H.quote(dir))))
    for _, db in ipairs { dir .. "/pipe.db", "file:" .. dir .. "/pipe.db?mode=ro", "pipe.db",
                          dir .. "/dir.db" } do
      for _, args in ipairs { "status r1", "runs", "db trust" } do
        local rc, out = H.shell(("cd %s && timeout 10 %s %s --db %s 2>&1"):format(H.quote(dir),
                                H.MEND, args, H.quote(db)))
        assert.are.equal(1, rc, args .. " " .. db .. ": " .. out)
        assert.matches("mend: database " .. db .. " is not a regular file", out, 1, true)
      end
    end
  end)

  -- the commands that make a database opened the pipe and said only "disk I/O error"
  it("says a named pipe is no regular file to the commands that make a database", function()
    local dir = H.tmp_dir()
    assert.are.equal(0, H.shell(("mkfifo %s/pipe.db"):format(H.quote(dir))))
    local wf = H.write_file(dir, "w.lua", 'return { name = "w", steps = { { name = "s", '
                            .. 'execute = function() return 1 end } } }')
    for _, args in ipairs { "run " .. H.quote(wf), "start w --workflows " .. H.quote(dir) } do
      local rc, out = H.shell(("cd %s && timeout 10 %s %s --db pipe.db 2>&1"):format(
                              H.quote(dir), H.MEND, args))
      assert.are.equal(1, rc, args .. ": " .. out)
      assert.matches("it is not a regular file", out, 1, true)
    end
  end)

  it("tells mend.trust_db and mend.db_mark of no database at a file: URI's file", function()
    local dir = H.tmp_dir()
    local uri = "file:" .. dir .. "/a%20b.db"
    assert.are.equal("none", mend.db_mark(uri))
    assert.is_false((pcall(mend.trust_db, uri)))
    assert.are.equal("none", mend.db_mark(":memory:"))
    assert.is_nil(io.open(dir .. "/a b.db", "rb"))
    H.close(H.reopen(dir .. "/a b.db", {}))
    assert.are.equal("unmarked", mend.db_mark(uri))
    assert.are.equal("unmarked", mend.trust_db(uri))
  end)
end)
