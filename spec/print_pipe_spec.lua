-- A worker whose stdout is a pipe nobody reads (issue 16): a workflow's print must not block
-- it. The pipe fills at 64 KiB; before, the first print past that held the worker for good.
local H = require "spec.helper"

local PRINTER = [[
return { name = "printer", steps = { { name = "p", execute = function()
  local line = string.rep("x", 99)
  for i = 1, 100 * 1024 do print(line) end   -- 10 MiB
  return 1
end } } }
]]

local function pid_of(cmd)
  local p = assert(io.popen(cmd))
  local pid = p:read("l")
  p:close()
  return assert(tonumber(pid), "no pid from: " .. cmd)
end

local function alive(pid)
  return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) == true
end

describe("a worker whose stdout is a pipe nobody reads", function()
  after_each(H.cleanup)

  it("runs a step that prints 10 MiB, then the next run, and still hears SIGTERM", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "printer.lua", PRINTER)
    local db = H.tmp_db()
    local fifo, log = dir .. "/stdout", dir .. "/worker.log"
    assert.is_true(os.execute("mkfifo " .. H.quote(fifo)))
    -- sleep holds the pipe open for reading and never reads it.
    local reader = pid_of(("sh -c 'exec sleep 600 < %s' >/dev/null 2>&1 & echo $!"):format(H.quote(fifo)))
    local worker = pid_of(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 --grace 1 > %s 2>>%s' & echo $!")
      :format(H.MEND, H.quote(db), H.quote(dir), H.quote(fifo), H.quote(log)))
    local ok, err = pcall(function()
      local ids = {}
      for k = 1, 2 do
        local rc, out = H.mend_cmd(db, "start printer --workflows " .. H.quote(dir))
        assert.are.equal(0, rc, out)
        ids[k] = out:match("(%w+)%s*$")
        H.wait_for("run " .. k .. " to succeed", function()
          return H.status_json(db, ids[k]).status == "succeeded"
        end, 30)
      end
      assert.is_true(alive(worker))
      os.execute(("kill -TERM %d"):format(worker))
      H.wait_for("the worker to exit on SIGTERM", function() return not alive(worker) end, 15)
      -- The lines it could not write are counted in one notice in its log.
      assert.is_truthy(H.slurp(log):find("lines of print dropped: stdout was not taking them", 1, true))
    end)
    os.execute(("kill -KILL %d %d 2>/dev/null"):format(worker, reader))
    assert(ok, err)
  end)
end)
