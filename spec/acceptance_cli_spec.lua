-- Acceptance, from outside: the `mend` command's exit codes (README, "The mend command"), its
-- repairs, and a `mend run` killed with SIGKILL mid-step then run again with its key (SPEC
-- section 9): every run ends once and no step whose success was recorded runs twice. SQLite.
local H = require "spec.helper"
local json = require("mend").json

-- A workflow file: steps a, b, c append "<step> <key>" to input.effects; b sleeps input.nap
-- seconds (real clock) before it does; input.outcome picks how c ends.
local FLOW = [[
local mend = require "mend"
local function mark(ctx, what)
  local f = assert(io.open(ctx.input.effects, "a"))
  f:write(what, " ", ctx.idempotency_key, "\n")
  f:close()
end
return { name = "acc", retry = { max_attempts = 2, initial = 0.01, jitter = 0 },
  compensate_retry = { max_attempts = 1 },
  steps = {
    { name = "a", execute = function(ctx) mark(ctx, "a"); return "A" end,
      compensate = function(ctx)
        mark(ctx, "undo-a-start")
        if (ctx.input.comp_nap or 0) > 0 then mend.sleep(ctx.input.comp_nap) end
        mark(ctx, "undo-a")
        if ctx.input.outcome == "stuck" then error(mend.retryable("refund down")) end end },
    { name = "b", execute = function(ctx)
        mark(ctx, "b-start")
        if (ctx.input.nap or 0) > 0 then mend.sleep(ctx.input.nap) end
        mark(ctx, "b"); return "B" end },
    { name = "c", execute = function(ctx)
        if ctx.input.outcome == "fatal" or ctx.input.outcome == "stuck" then
          error(mend.fatal("declined")) end
        if ctx.input.outcome == "busy" then error(mend.retryable("busy")) end
        mark(ctx, "c-try")
        if ctx.input.outcome == "flaky" and ctx.attempt == 1 then
          error(mend.retryable("later", { retry_after = ctx.input.nap })) end
        mark(ctx, "c"); return "C" end },
  } }
]]

local function lines(path)
  local out = {}
  for l in H.read(path):gmatch("[^\n]+") do out[#out + 1] = l:match("^(%S+)") end
  return out
end

local function setup()
  local dir = H.tmp_dir()
  local file = H.write_file(dir, "acc.lua", FLOW)
  return dir, file, dir .. "/mend.db", dir .. "/effects"
end

local function input(effects, outcome, nap, comp_nap)
  return H.quote(json.encode { effects = effects, outcome = outcome or "ok", nap = nap or 0,
                               comp_nap = comp_nap or 0 })
end

describe("acceptance: mend exit codes #sqlite", function()
  after_each(H.cleanup)

  it("0 succeeded, 3 compensated, 4 needs attention", function()
    local _, file, db, eff = setup()
    local rc = H.mend_cmd(db, ("run %s --clock virtual --input %s"):format(file, input(eff)))
    assert.are.equal(0, rc)
    rc = H.mend_cmd(db, ("run %s --clock virtual --input %s"):format(file, input(eff, "fatal")))
    assert.are.equal(3, rc)
    rc = H.mend_cmd(db, ("run %s --clock virtual --input %s"):format(file, input(eff, "stuck")))
    assert.are.equal(4, rc)
    rc = H.mend_cmd(db, ("run %s --clock virtual --input %s"):format(file, input(eff, "busy")))
    assert.are.equal(4, rc)   -- attempts exhausted: compensated, then a dead letter
  end)

  it("1 for mend's own failures, 2 for usage errors", function()
    local dir, file, db = setup()
    local bad = H.write_file(dir, "bad.lua", "return { name = 'x', steps = { { name = 'a' } } }")
    assert.are.equal(1, (H.mend_cmd(db, "run " .. bad)))
    assert.are.equal(1, (H.mend_cmd(db, "run " .. file .. " --input '{nope'")))
    assert.are.equal(1, (H.mend_cmd(db, "status no-such-run")))
    assert.are.equal(2, (H.mend_cmd(db, "run " .. file .. " --no-such-flag")))
    assert.are.equal(2, (H.mend_cmd(db, "no-such-command")))
    assert.are.equal(2, (H.mend_cmd(db, "status")))
  end)

  -- A script waiting with --timeout must tell "still going" from "no such run" (both were 1).
  it("mend wait: 5 when --timeout passes first, 1 for a run it cannot find", function()
    local _, file, db, eff = setup()
    local rc, id = H.mend_in(nil, db, ("start %s --input %s"):format(file, input(eff)))
    assert.are.equal(0, rc, id)
    id = id:match("%S+")
    local rc2, out, err = H.mend_in(nil, db, "wait " .. id .. " --timeout 0.2")
    assert.are.equal(5, rc2, out)
    assert.matches("did not finish within 0.2s", err or out, 1, true)
    assert.are.equal(1, (H.mend_cmd(db, "wait no-such-run --timeout 0.2")))
  end)

  it("repairs from the shell: dlq lists, dlq retry and resolve, refusals", function()
    local _, file, db, eff = setup()
    local rc, out = H.mend_in(nil, db, ("run %s --clock virtual --json --input %s")
      :format(file, input(eff, "stuck")))
    assert.are.equal(4, rc)
    local id = json.decode(out).id
    local rc2, list = H.mend_in(nil, db, "dlq --json")
    assert.are.equal(0, rc2)
    local entries = json.decode(list)
    assert.are.equal(1, #entries)
    assert.are.equal(id, entries[1].run_id)
    assert.are.equal("compensation_failed", entries[1].reason)
    assert.are.equal("a", entries[1].step)
    assert.are.equal(0, (H.mend_cmd(db, "dlq resolve " .. id .. " --note 'refunded by hand'")))
    assert.are.equal("resolved", H.status_json(db, id).status)
    assert.are.equal(1, (H.mend_cmd(db, "dlq retry " .. id)))
    assert.are.equal(1, (H.mend_cmd(db, "cancel " .. id)))
    assert.are.equal(0, #json.decode((select(2, H.mend_in(nil, db, "dlq --json")))))
  end)
end)

describe("acceptance: a mend run killed mid-step #sqlite", function()
  after_each(H.cleanup)

  -- Starts `mend run --key K` in the background, real clock; its pid.
  local function spawn(file, db, eff, key, outcome, nap, comp_nap)
    local pidf = os.tmpname()
    os.execute(("%s run %s --db %s --key %s --input %s >/dev/null 2>&1 & echo $! >%s")
      :format(H.MEND, H.quote(file), H.quote(db), key, input(eff, outcome, nap, comp_nap), pidf))
    local pid = H.read_number(pidf)
    os.remove(pidf)
    return pid
  end

  for _, case in ipairs {
    { at = "b-start", outcome = "ok", want = 0, final = "succeeded",
      effects = { "a", "b-start", "b-start", "b", "c-try", "c" } },
    { at = "b-start", outcome = "fatal", want = 3, final = "compensated",
      effects = { "a", "b-start", "b-start", "b", "undo-a-start", "undo-a" } },
    -- killed in a retry wait: the next attempt is attempt 2, once
    { at = "c-try", outcome = "flaky", nap = 0, wait = 2, want = 0, final = "succeeded",
      effects = { "a", "b-start", "b", "c-try", "c-try", "c" }, attempts = { c = 2 } },
    -- killed inside a compensation: it runs again, the done steps are not run again
    { at = "undo-a-start", outcome = "fatal", nap = 0, comp_nap = 1.5, want = 3,
      final = "compensated",
      effects = { "a", "b-start", "b", "undo-a-start", "undo-a-start", "undo-a" } },
  } do
    it(("resumes with --key after a SIGKILL at %s (%s)"):format(case.at, case.outcome), function()
      local _, file, db, eff = setup()
      local pid = spawn(file, db, eff, "k1", case.outcome, case.wait or (case.nap or 1.5),
                        case.comp_nap)
      H.wait_for("the step to begin", function()
        return H.index_of(lines(eff), case.at) ~= nil
      end, 20)
      os.execute("kill -KILL " .. pid)
      H.wait_for("the run's process to end", function()
        return not os.execute("kill -0 " .. pid .. " 2>/dev/null")
      end, 5)
      -- its lease (30 s) held by a dead process: a run with its key carries it on here
      local rc, out = H.mend_cmd(db, ("run %s --key k1 --input %s"):format(H.quote(file),
        input(eff, case.outcome, 0)))
      assert.are.equal(case.want, rc, out)
      local id = H.sql(db, "SELECT id FROM runs")[1]
      for step, n in pairs(case.attempts or {}) do
        assert.are.equal(n, H.step(H.status_json(db, id), step).attempts)
      end
      local rows = H.sql(db, "SELECT status FROM runs")
      assert.are.same({ case.final }, rows)
      assert.are.same(case.effects, lines(eff))
      -- one key per step whatever the attempt: run id/step
      for l in H.read(eff):gmatch("[^\n]+") do
        local what, key = l:match("^(%S+) (%S+)$")
        local step = what:gsub("^undo%-", ""):gsub("%-start$", ""):gsub("%-try$", "")
        assert.are.equal(id .. "/" .. step, key)
      end
    end)
  end
end)
