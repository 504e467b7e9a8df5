-- Operating mend from the command line against a real database: listing runs and breakers,
-- repairing dead letters, cancelling, overriding breakers, alert commands. Each operation is
-- recorded with who did it; each refuses clearly when it makes no sense.
local H = require "spec.helper"
local mend = require "mend"

local MEND, q, run = H.MEND, H.quote, H.shell

local function mend_cmd(db, args) return run(MEND .. " " .. args .. " --db " .. q(db)) end

local function json_of(db, args)
  local rc, out = mend_cmd(db, args .. " --json")
  assert.are.equal(0, rc, out)
  return mend.json.decode(out)
end

-- A saga whose refund fails while the flag file exists.
local REFUND = require("spec.support.serve_harness").REFUND

local function setup()
  local dir = H.tmp_dir()
  local db = H.new_db(dir, "ops.db")
  local wf = H.write_file(dir, "refund.lua", REFUND)
  local flag = H.write_file(dir, "refund-down", "")
  local rc, out = mend_cmd(db, "run " .. wf .. " --input " .. q('{"flag":"' .. flag .. '"}'))
  assert.are.equal(4, rc, out)
  local id = json_of(db, "runs")[1].id
  return db, dir, wf, flag, id
end

describe("mend runs, dlq and breakers", function()
  after_each(H.cleanup)

  it("list what an operator needs, as tables or JSON", function()
    local db, _, _, _, id = setup()
    local runs = json_of(db, "runs")
    assert.are.equal(1, #runs)
    assert.are.equal("needs_attention", runs[1].status)
    assert.are.equal(id, json_of(db, "runs --attention")[1].id)
    assert.are.equal(0, #json_of(db, "runs --status succeeded"))
    assert.are.equal(1, #json_of(db, "runs --since 1000000001"))   -- epoch seconds, in 2001
    assert.are.equal(0, #json_of(db, "runs --since 4000000000"))   -- a time not come yet
    assert.are.equal(1, #json_of(db, "runs --since 1h"))
    assert.are.equal(1, #json_of(db, "runs --since 1.5h"))
    for _, since in ipairs { "5.", ".5", "5.h" } do   -- as serve's since: digits both sides
      local rc, out = mend_cmd(db, "runs --since " .. since)
      assert.are.equal(2, rc, since)
      assert.matches("--since must be like 90, 15m, 2h or 7d, got " .. since, out, 1, true)
    end
    local dlq = json_of(db, "dlq")
    assert.are.equal("compensation_failed", dlq[1].reason)
    assert.are.equal("charge", dlq[1].step)
    local rc, out = mend_cmd(db, "dlq")
    assert.are.equal(0, rc)
    assert.matches("RUN%s+REASON%s+STEP%s+AGE%s+LAST ERROR", out)
    assert.matches(id .. "%s+compensation_failed%s+charge", out)
    local breakers = json_of(db, "breakers")
    local keys = {}
    for _, b in ipairs(breakers) do keys[b.key] = b.state end
    assert.are.same({ reserve = "closed", psp = "closed", ship = "closed" }, keys)
    -- (0x10 had been read as 16; 2^31, past an int, was exit 1 naming a line of mend's Lua)
    for _, limit in ipairs { "zero", "0x10", "0", "2147483648" } do
      rc, out = mend_cmd(db, "runs --limit " .. limit)
      assert.are.equal(2, rc, limit)
      assert.matches("%-%-limit must be a whole number from 1 to 2147483647, got " .. limit, out)
    end
  end)
end)

describe("mend dlq retry", function()
  after_each(H.cleanup)

  it("refuses while the cause is still there, then finishes the compensation once it is fixed", function()
    local db, _, _, flag, id = setup()
    local rc, out = mend_cmd(db, "dlq retry " .. id)
    assert.are.equal(4, rc, out)                 -- retried, failed again: back in the queue
    os.remove(flag)                              -- the refund service is back
    rc, out = mend_cmd(db, "dlq retry " .. id)
    assert.are.equal(3, rc, out)
    assert.matches("compensated", out)
    assert.are.equal(0, #json_of(db, "dlq"))
    local ops = {}
    for _, h in ipairs(json_of(db, "history " .. id)) do
      if h.event == "operator" then ops[#ops + 1] = h.detail end
    end
    assert.are.equal(2, #ops)
    assert.matches("^dlq retry by .+@.+ %(mend cli%)$", ops[1])
    rc, out = mend_cmd(db, "dlq retry " .. id)
    assert.are.equal(1, rc)
    -- the command's words, not the Lua method's (eng:dlq_retry's say dlq_retry: operations_spec)
    assert.are.equal("mend: run " .. id .. " is compensated: only a run in the dead-letter queue"
                     .. " can be retried\n", out)
  end)
end)

describe("mend dlq resolve", function()
  after_each(H.cleanup)

  it("needs a note, records it, and ends the run resolved", function()
    local db, _, _, _, id = setup()
    local rc, out = mend_cmd(db, "dlq resolve " .. id)
    assert.are.equal(2, rc)
    assert.matches("%-%-note TEXT is required", out)
    for _, blank in ipairs { "", "   " } do   -- a note of nothing says nothing either
      rc, out = mend_cmd(db, "dlq resolve " .. id .. " --note " .. q(blank))
      assert.are.equal(2, rc, out)
      assert.matches("%-%-note TEXT is required", out)
    end
    rc, out = mend_cmd(db, "dlq resolve " .. id .. " --note " .. q("refunded by hand"))
    assert.are.equal(0, rc, out)
    assert.are.equal("resolved", json_of(db, "status " .. id).status)
    local found
    for _, h in ipairs(json_of(db, "history " .. id)) do
      if h.event == "operator" then found = h.detail end
    end
    assert.matches("^dlq resolve by .+: refunded by hand$", found)
  end)
end)

describe("mend cancel", function()
  after_each(H.cleanup)

  it("refuses a run that has ended", function()
    local db, _, _, _, id = setup()
    local rc, out = mend_cmd(db, "cancel " .. id)
    assert.are.equal(1, rc)
    assert.matches("is needs_attention: only a running run can be cancelled", out)
  end)

  it("asks the live worker holding a run to cancel it, which compensates in reverse", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "c.db")
    H.write_file(dir, "slow.lua", [[
local mend = require "mend"
return { name = "slow", steps = {
  { name = "a", execute = function() return 1 end, compensate = function() end },
  { name = "b", execute = function() mend.sleep(30) end },
} }]])
    local rc, out = mend_cmd(db, "start slow --workflows " .. dir)
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = io.popen(string.format("sh -c 'exec %s worker --db %s --workflows %s --poll 0.02 >/dev/null 2>&1' & echo $!",
      MEND, q(db), q(dir))):read("l")
    for _ = 1, 200 do
      local st = json_of(db, "status " .. id)
      if st.steps[2].status == "running" then break end
      os.execute("sleep 0.02")
    end
    rc, out = mend_cmd(db, "cancel " .. id)
    assert.are.equal(0, rc, out)
    assert.matches("held by a live worker", out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    os.execute("kill -TERM " .. pid)
    assert.are.equal(3, rc, out)
    local st = json_of(db, "status " .. id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.equal("compensated", st.steps[1].status)
  end)
end)

describe("mend breakers", function()
  after_each(H.cleanup)

  it("opens and resets a breaker by hand, audited, and refuses an unknown one", function()
    local db = setup()
    local rc, out = mend_cmd(db, "breakers open psp --for 60")
    assert.are.equal(0, rc, out)
    local state
    for _, b in ipairs(json_of(db, "breakers")) do if b.key == "psp" then state = b end end
    assert.are.equal("open", state.state)
    rc = mend_cmd(db, "breakers reset psp")
    assert.are.equal(0, rc)
    for _, b in ipairs(json_of(db, "breakers")) do if b.key == "psp" then state = b end end
    assert.are.equal("closed", state.state)
    local audit = H.sql(db, "SELECT op || ' ' || target FROM audit ORDER BY seq")
    assert.are.same({ "open psp", "reset psp" }, audit)
    rc, out = mend_cmd(db, "breakers open nope")
    assert.are.equal(1, rc)
    assert.matches("no breaker nope", out)
    rc, out = mend_cmd(db, "breakers flip psp")
    assert.are.equal(2, rc)
    assert.matches("unknown breaker operation flip", out)
  end)
end)

describe("the alert command", function()
  after_each(H.cleanup)

  it("gets each alert once, as JSON on its stdin", function()
    local dir = H.tmp_dir()
    local out_file = dir .. "/alerts.jsonl"
    local eng = H.new_engine({ alert_command = "cat >> " .. q(out_file) })
    eng:register{ name = "x", steps = {
      { name = "a", execute = function() error(mend.compensable("half done", { severity = 3 })) end } } }
    local id = eng:start("x", {})
    eng:run()
    local lines = {}
    for line in io.lines(out_file) do lines[#lines + 1] = mend.json.decode(line) end
    assert.are.equal(1, #lines)
    assert.are.equal("dead_letter", lines[1].kind)
    assert.are.equal(id, lines[1].run_id)
    assert.are.equal("severity_3", lines[1].reason)
  end)
end)

-- A list printed as one JSON document is longer than one encoding may be (mend.json stops at
-- 2^20 values): 160k runs are 1.3M values, their dead letters 1.1M. Printed in one encoding,
-- nothing was printed and mend exited 1, as `mend history --json` did before its pages.
-- Lists are written a slice of rows at a time; a run's status each part that fits whole.
describe("a list or a run too long for one JSON encoding", function()
  after_each(H.cleanup)
  local N = 160000

  -- SQL's rows i = 1..n (a FROM clause) and a run id made of i and a letter, in db's dialect.
  local function numbered(db, n, letter)
    local ids = H.is_pg(db) and ("FROM generate_series(1, %d) AS n(i)"):format(n) or
      ("FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
       .. " SELECT i FROM n) n"):format(n)
    local id = H.is_pg(db) and ("'%s' || lpad(i::text, 15, '0')"):format(letter)
               or ("printf('%s%%015d', i)"):format(letter)
    return ids, id
  end

  -- N more runs, ended, and N dead letters, in one statement each (one transaction).
  local function grow(db)
    local ids, id = numbered(db, N, "x")
    H.sql(db, ("INSERT INTO runs(id, workflow, status, input, attention, created, updated)"
      .. " SELECT %s, 'refund', 'succeeded', '{}', 0, i, i %s"):format(id, ids))
    H.sql(db, ("INSERT INTO dlq(run_id, reason, step, error, detail, at)"
      .. " SELECT %s, 'attempts_exhausted', 'charge', 'down', 'x', i %s"):format(id, ids))
  end

  it("is printed whole by mend runs --json and mend dlq --json", function()
    local db, _, _, _, id = setup()
    grow(db)
    local runs = json_of(db, "runs --limit " .. (N + 1))
    assert.are.equal(N + 1, #runs)
    assert.are.equal(id, runs[1].id)
    assert.are.equal(("x%015d"):format(N), runs[2].id)
    assert.are.equal(("x%015d"):format(1), runs[N + 1].id)
    local dlq = json_of(db, "dlq")
    assert.are.equal(N + 1, #dlq)
    assert.are.equal(("x%015d"):format(1), dlq[1].run_id)
    assert.are.equal(id, dlq[N + 1].run_id)
    local rc, out = mend_cmd(db, "runs --status failed --json")
    assert.are.equal(0, rc, out)
    assert.are.equal("[]\n", out)   -- an empty list, not an object
  end)

  -- A run's status holds each item of a map as a branch: 110k items are 1.2M values.
  it("is a run's status whole in mend status --json and mend wait --json", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "map.db")
    local wf = H.write_file(dir, "m.lua", [[
return { name = "m", steps = { { name = "s", map = function() return { 1, 2, 3 } end,
                                 step = { execute = function(_, n) return n end } } } }
]])
    local rc, out = mend_cmd(db, "run " .. q(wf))
    assert.are.equal(0, rc, out)
    local id = json_of(db, "runs")[1].id
    local M = 110000
    local items = H.is_pg(db) and ("FROM generate_series(4, %d) AS n(i)"):format(M + 3) or
      ("FROM (WITH RECURSIVE n(i) AS (SELECT 4 UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
       .. " SELECT i FROM n) n"):format(M + 3)
    H.sql(db, ("INSERT INTO steps(run_id, idx, name, status, attempts, result, updated)"
      .. " SELECT '%s', %d + i - 1, 's/' || i, 'succeeded', 1, '7', 1 " .. items)
      :format(id, 1 << 20))
    for _, command in ipairs{ "status " .. id, "wait " .. id } do
      local st = json_of(db, command)
      assert.are.equal("succeeded", st.status)
      local branches = command:match("^status") and st.steps[1].branches
      if branches then
        assert.are.equal(M + 3, #branches)
        assert.are.equal(2, branches[2].result)
        assert.are.equal(tostring(M + 3), branches[M + 3].name)
        assert.are.same({}, st.input)
      else
        assert.are.equal(M + 4, #st.steps)
        assert.are.equal("s/" .. (M + 3), st.steps[M + 4].name)
      end
    end
  end)

  -- The bound is of values, not rows: 50 runs whose inputs hold 21k numbers each are 1.05M.
  it("is printed whole when a few rows hold most of the values", function()
    local db = setup()
    local input = "[" .. ("1,"):rep(20999) .. "2]"
    local ids, id = numbered(db, 50, "y")
    H.sql(db, ("INSERT INTO runs(id, workflow, status, input, attention, created, updated)"
      .. " SELECT %s, 'refund', 'succeeded', '%s', 0, 3e9 + i, 3e9 + i %s"):format(id, input, ids))
    local runs = json_of(db, "runs")
    assert.are.equal(50, #runs)
    assert.are.equal(("y%015d"):format(50), runs[1].id)
    assert.are.equal(21000, #runs[50].input)
    assert.are.equal(2, runs[50].input[21000])
  end)

  -- mend.json encodes at most 100 levels: a result nested 98 deep is 101 in a run's status.
  it("is a run's status whole when a step's result is nested as deep as a result may be", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "deep.db")
    local wf = H.write_file(dir, "deep.lua", [[
return { name = "deep", steps = { { name = "a", execute = function()
  local r = { leaf = true }
  for _ = 1, 97 do r = { a = r } end
  return r
end } } }
]])
    local rc, out = mend_cmd(db, "run " .. q(wf))
    assert.are.equal(0, rc, out)
    local st = json_of(db, "status " .. json_of(db, "runs")[1].id)
    local r, depth = st.steps[1].result, 1
    while r.a do r, depth = r.a, depth + 1 end
    assert.are.equal(98, depth)
    assert.is_true(r.leaf)
  end)

  -- mend.json counts a control character in a string as a value: results of line breaks,
  -- 1.06M in all, one string of them more than the CLI encodes whole (a two-byte character
  -- where it is cut in pieces).
  it("is a run's status whole when its strings hold most of the values", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "nl.db")
    local wf = H.write_file(dir, "nl.lua", [[
local big = ("\n"):rep(262143) .. "\u{e9}" .. ("\n"):rep(500000)
return { name = "nl", steps = {
  { name = "a", execute = function() return ("\n"):rep(300000) end },
  { name = "b", execute = function() return big end } } }
]])
    local f = io.popen(MEND .. " run " .. q(wf) .. " --json --db " .. q(db) .. " 2>/dev/null")
    local st = mend.json.decode(f:read("a"))
    assert.is_true(f:close())
    assert.are.equal("succeeded", st.status)
    assert.are.equal(300000, #st.steps[1].result)
    assert.are.equal(("\n"):rep(262143) .. "\u{e9}" .. ("\n"):rep(500000), st.steps[2].result)
    local again = json_of(db, "status " .. st.id)
    assert.are.equal(st.steps[2].result, again.steps[2].result)
  end)
end)

describe("a run's values as mend prints them", function()
  after_each(H.cleanup)

  -- A decoded table's order is its process's hash order: two reads of one run differed.
  it("have their objects' keys sorted, in status, status --json and history --json", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "sorted.db")
    local wf = H.write_file(dir, "obj.lua", [[
return { name = "obj", steps = { { name = "s", execute = function(ctx, input)
  return { zeta = 1, alpha = { y = 1, b = 2 }, q = input } end } } }]])
    local rc, out = mend_cmd(db, "run " .. q(wf) .. " --clock virtual --input "
                             .. q('{"one":1,"two":2,"three":3,"four":4,"five":5}'))
    assert.are.equal(0, rc, out)
    local id = json_of(db, "runs")[1].id
    local input = '{"five":5,"four":4,"one":1,"three":3,"two":2}'
    local result = '{"alpha":{"b":2,"y":1},"q":' .. input .. ',"zeta":1}'
    local _, shown = mend_cmd(db, "status " .. id)
    assert.matches("input +" .. input:gsub("%p", "%%%0"), shown)
    assert.matches("result " .. result:sub(1, 40):gsub("%p", "%%%0"), shown)
    local _, st = mend_cmd(db, "status " .. id .. " --json")
    assert.truthy(st:find('"input":' .. input, 1, true), st)
    assert.truthy(st:find('"result":' .. result, 1, true), st)
    assert.truthy(st:find('^{"attention":false,"created":'), st)
    local _, hist = mend_cmd(db, "history " .. id .. " --json")
    assert.truthy(hist:find('^%[{"at":'), hist)
  end)
end)

describe("--who NAME", function()
  after_each(H.cleanup)

  local function operator_notes(db, id)
    local notes = {}
    for _, h in ipairs(json_of(db, "history " .. id)) do
      if h.event == "operator" then notes[#notes + 1] = h.detail end
    end
    return notes
  end

  it("refused, is shown on one line, a line break in it spelled once", function()
    local dir = H.tmp_dir()
    local rc, out = mend_cmd(dir .. "/none.db", "start x --who " .. q("x\ny\"z"))
    assert.are.equal(2, rc, out)
    assert.are.equal('mend: --who NAME must be 1 to 64 printable ASCII characters, got "x\\ny\\"z"',
                     out:match("^[^\n]*"))
    rc, out = mend_cmd(dir .. "/none.db", "start x --http-allow " .. q("a\nb,c"))
    assert.are.equal(2, rc, out)
    assert.matches('^mend: %-%-http%-allow: "a\\nb" is not a host', out)
  end)

  it("records who asked a resolve, a retry and a cancel in front of user@host; empty refused", function()
    local db, dir, _, flag, id = setup()
    for _, bad in ipairs { "", "a\tb", string.rep("x", 65) } do
      local rc, out = mend_cmd(db, "dlq resolve " .. id .. " --note done --who " .. q(bad))
      assert.are.equal(2, rc, out)
      assert.matches("%-%-who NAME must be 1 to 64 printable ASCII characters", out)
      rc, out = mend_cmd(db, "cancel " .. id .. " --who " .. q(bad))
      assert.are.equal(2, rc, out)
      rc, out = mend_cmd(db, "dlq retry " .. id .. " --who " .. q(bad))
      assert.are.equal(2, rc, out)
    end
    assert.are.same({}, operator_notes(db, id))
    os.remove(flag)
    local rc, out = mend_cmd(db, "dlq retry " .. id .. " --detach --who alice")
    assert.are.equal(0, rc, out)
    assert.matches("^dlq retry by alice via .+@.+ %(mend cli%)$", operator_notes(db, id)[1])
    -- a run of its own for the cancel and the resolve
    H.write_file(dir, "slow.lua", [[
return { name = "slow", steps = { { name = "w", wait_for = "go", timeout = 3600 } } }]])
    rc, out = mend_cmd(db, "start slow --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local run = out:match("(%S+)")
    rc, out = mend_cmd(db, "cancel " .. run .. " --who 'bob smith'")
    assert.are.equal(0, rc, out)
    assert.matches("^cancel by bob smith via .+ %(mend cli%)", operator_notes(db, run)[1])
    local _, shown = mend_cmd(db, "history " .. run)
    assert.matches("bob smith via", shown)
  end)
end)
