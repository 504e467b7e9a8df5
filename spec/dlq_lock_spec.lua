-- A person's repair from the command line (`mend dlq resolve`, `mend dlq retry`, `mend prune`)
-- while another process holds the write lock for a moment (a worker's batch, the sqlite3 shell):
-- it waits for the lock, up to the store's default busy wait (5 s), and is made; it does not
-- fail after the loop's own short wait (0.1 s) naming the lock.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"

local MEND, q, sh = H.MEND, H.quote, H.shell

describe("a repair from the command line under another process's lock of 1 s #sqlite", function()
  after_each(function() H.cleanup() end)

  local function under_lock(cmd)
    local dir, db = S.workspace()
    local id, flag = S.dead_letter(dir, db, "down")
    os.remove(flag)   -- a retry's compensation succeeds
    return dir, db, id, function(args)
      S.hold_write_lock(db, 1)
      os.execute("sleep 0.3")
      local t0 = H.wall()
      local rc, out = sh(MEND .. " " .. args:format(id) .. " --db " .. q(db) .. " 2>&1")
      return rc, out, H.wall() - t0
    end
  end

  it("mend dlq resolve waits for the lock and resolves the run", function()
    local _, db, id, run = under_lock()
    local rc, out, took = run("dlq resolve %s --note 'refunded by hand'")
    assert.is_falsy(out:find("mend: [^\n]*database is locked"), out)
    assert.are.equal(0, rc, out)
    assert.is_true(took > 0.5, "took " .. took)
    assert.are.same({ "resolved" }, H.sql(db, "SELECT status FROM runs WHERE id = '" .. id .. "'"))
  end)

  it("mend prune waits for the lock and prunes", function()
    local _, db, _, run = under_lock()
    local rc, out, took = run("prune --older-than 1s")
    assert.is_falsy(out:find("mend: [^\n]*database is locked"), out)
    assert.are.equal(0, rc, out)
    assert.is_true(took > 0.5, "took " .. took)
  end)

  it("mend prune under a lock held past its wait names the file and the lock once", function()
    local _, db = S.workspace()
    H.close(H.new_engine({ db = db }))
    local release = S.hold_write_lock(db, 20)
    local rc, out = sh(MEND .. " prune --older-than 1s --db " .. q(db) .. " 2>&1")
    release()
    assert.are.equal(1, rc, out)
    -- (the Lua method's "prune: " had been put before the store's own "FILE: prune: ")
    assert.matches("^mend: [^\n]*: prune: database is locked by another process %(waited 5", out)
    assert.are.equal(1, select(2, out:gsub("prune: ", "")), out)
  end)

  it("mend dlq retry waits for the lock and retries the run", function()
    local _, db, id, run = under_lock()
    local rc, out = run("dlq retry %s")
    assert.is_falsy(out:find("mend: [^\n]*database is locked"), out)
    assert.are_not.equal(1, rc, out)   -- 1: the command failed; else the run's end
    assert.are_not.same({ "needs_attention" }, H.sql(db, "SELECT status FROM runs WHERE id = '" .. id .. "'"))
  end)
end)
