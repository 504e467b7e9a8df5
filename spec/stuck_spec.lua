-- No run stuck without a sign: what `mend` says and does about runs that no live worker holds
-- (status, wait, cancel, run --key and its child runs, dlq retry from elsewhere), history times
-- that never go back, waits too long for any clock, breaker waits as SPEC section 2 draws them,
-- and breakers whose open time is up. Real `mend` processes (workers, killed and stopped ones
-- included) against real database files.
local H = require "spec.helper"
local mend = require "mend"
local json = mend.json

local MEND, q = H.MEND, H.quote

local mend_in = H.mend_in

local function json_of(db, args)
  local rc, out, err = mend_in(nil, db, args .. " --json")
  assert.are.equal(0, rc, err)
  return json.decode(out)
end

-- Starts `mend ARGS --db DB` in the background from `dir`; returns its pid.
local function spawn(dir, db, args)
  local p = io.popen(("cd %s && sh -c 'exec %s %s --db %s >/dev/null 2>&1' & echo $!")
    :format(q(dir), MEND, args, q(db)))
  local pid = p:read("l")
  p:close()
  return pid
end

local function signal(pid, sig) os.execute(("kill -%s %s 2>/dev/null"):format(sig, pid)) end

-- Waits (up to 10 s) until pred(status) holds for run id.
local function until_status(db, id, pred)
  for _ = 1, 500 do
    local rc, out = mend_in(nil, db, "status " .. id .. " --json")
    if rc == 0 then
      local st = json.decode(out)
      if pred(st) then return st end
    end
    os.execute("sleep 0.02")
  end
  error("run " .. id .. " never reached the state waited for")
end

local function step_is(name, status)
  return function(st)
    for _, s in ipairs(st.steps) do if s.name == name then return s.status == status end end
    return false
  end
end

-- Kills a process and waits until it is gone (a dead process no longer holds its runs).
local function kill_dead(pid)
  signal(pid, "KILL")
  for _ = 1, 500 do
    if not os.execute("kill -0 " .. pid .. " 2>/dev/null") then return end
    os.execute("sleep 0.01")
  end
end

-- step a, then a durable wait of `nap` seconds, then c; a compensates.
local function slow(nap)
  return ([[
local mend = require "mend"
return { name = "slow", steps = {
  { name = "a", execute = function() return 1 end, compensate = function() end },
  { name = "b", sleep = %s },
  { name = "c", execute = function() return 3 end },
} }]]):format(nap)
end

local function setup(nap)
  local dir = H.tmp_dir()
  H.write_file(dir, "slow.lua", slow(nap or 30))
  return dir, H.new_db(dir, "jobs.db")
end

local function start(dir, db, extra)
  local rc, out, err = mend_in(dir, db, "start slow --workflows . " .. (extra or ""))
  assert.are.equal(0, rc, err)
  return out:match("(%S+)")
end

-- Every history row at or after the one before.
local function assert_ordered(db, id)
  local prev
  for _, h in ipairs(json_of(db, "history " .. id)) do
    if prev then assert.is_true(h.at >= prev, ("row %d at %.3f before %.3f"):format(h.seq, h.at, prev)) end
    prev = h.at
  end
end

local function operators(db, id)
  local ops = {}
  for _, h in ipairs(json_of(db, "history " .. id)) do
    if h.event == "operator" then ops[#ops + 1] = h.detail end
  end
  return ops
end

describe("a run that no live worker holds", function()
  after_each(H.cleanup)

  -- The hint is a command to paste: a path with a space, unquoted, was two words to the shell.
  it("is told by wait with a command that quotes a database path as a shell needs #sqlite",
     function()
    local dir = H.tmp_dir() .. "/it's here"
    assert(os.execute("mkdir " .. q(dir)))
    H.write_file(dir, "w.lua", 'return { name = "w", steps = { { name = "s", wait_for = "go" } } }')
    local db = dir .. "/my jobs.db"
    local rc, out, err = H.mend_in(dir, db, "start w --workflows .")
    assert.are.equal(0, rc, err)
    rc, out, err = H.mend_in(nil, db, "wait " .. out:match("%S+") .. " --timeout 0.1")
    assert.are.equal(5, rc, err)
    assert.matches("(start one: mend worker --db " .. q(db) .. ")", err, 1, true)
  end)

  it("is shown waiting for a worker, with its waiting step's due time; wait says why it waits", function()
    local dir, db = setup(30)
    local id = start(dir, db)
    local worker = spawn(dir, db, "worker --workflows . --poll 0.02")
    local st = until_status(db, id, step_is("b", "sleeping"))
    local rc, out = mend_in(nil, db, "status " .. id)
    assert.are.equal(0, rc)
    assert.matches("held by worker %S+", out)
    assert.is_nil(out:find("waiting for a worker", 1, true))
    signal(worker, "TERM")                       -- gives its lease back, leaves b sleeping
    until_status(db, id, function(s) return s.owner == nil end)
    rc, out = mend_in(nil, db, "status " .. id)
    assert.are.equal(0, rc)
    assert.matches("waiting for a worker: no live worker holds this run", out)
    local due = st.steps[2].due
    local stamp = os.date("!%Y-%m-%d %H:%M:%S", math.floor(due * 1000 + 0.5) // 1000):gsub("%-", "%%-")
    assert.matches("due: b sleeping, due " .. stamp .. "%.%d%d%d UTC %(in %d+ s%)", out)
    local secs = tonumber(out:match("%(in (%d+) s%)"))
    assert.is_true(secs > 0 and secs <= 30, out)
    local err
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 0.3")
    assert.are.equal(5, rc)   -- the run goes on
    local _, said = err:gsub("is waiting for a worker", "")
    assert.are.equal(1, said, err)
    assert.matches("no live worker holds it %(start one: mend worker", err)
    local password = H.is_pg(db) and db:match("^%a+://[^:/@]+:([^@]+)@")
    if password then   -- the server is named, never its password
      assert.is_nil(err:find(password, 1, true), err)
      assert.matches("mend worker %-%-db '?%a+://[^:/@]+@", err)   -- quoted: a URI's ? and &
    end
    assert.matches("b sleeping, due .- UTC %(in %d+ s%)", err)
    assert.matches("did not finish within 0.3s", err)
    -- a bad flag is a usage error, told before anything about the run
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout soon")
    assert.are.equal(2, rc)
    assert.matches("^mend: %-%-timeout must be a finite number > 0, got soon\n", err)
  end)
end)

describe("mend cancel", function()
  after_each(H.cleanup)

  it("cancels here a run whose worker was killed with its lease still running", function()
    local dir, db = setup(30)
    local id = start(dir, db)
    local worker = spawn(dir, db, "worker --workflows . --poll 0.02 --lease 30")
    until_status(db, id, step_is("b", "sleeping"))
    kill_dead(worker)
    local rc, out, err = mend_in(nil, db, "cancel " .. id)
    assert.are.equal(0, rc, err)
    assert.is_nil(out:find("live worker", 1, true), out)
    assert.matches("compensated", out)
    local st = json_of(db, "status " .. id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.equal("pending", st.steps[3].status)
    assert_ordered(db, id)
  end)

  it("asks a live worker; if it dies before it could, the next worker honours the request", function()
    local dir, db = setup(30)
    local id = start(dir, db)
    local first = spawn(dir, db, "worker --workflows . --poll 0.02")
    until_status(db, id, step_is("b", "sleeping"))
    signal(first, "STOP")                        -- alive, holding its lease, polling nothing
    local rc, out, err = mend_in(nil, db, "cancel " .. id)
    assert.are.equal(0, rc, err)
    assert.matches("held by a live worker %(%S+%); it was asked to cancel", out)
    rc, out = mend_in(nil, db, "status " .. id)
    assert.matches("cancel%s+requested", out)
    kill_dead(first)
    local second = spawn(dir, db, "worker --workflows . --poll 0.02")
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 20")
    signal(second, "TERM")
    assert.are.equal(3, rc, out .. err)
    local st = json_of(db, "status " .. id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.equal("compensated", st.steps[1].status)
    assert.are.equal("pending", st.steps[3].status)   -- c never ran
    -- the run's error and history name who asked, as a cancel done here names its canceller
    local ops = operators(db, id)
    local who = ops[1]:match("^cancel requested by (.+)$")
    assert.matches("%(mend cli%)$", who)
    assert.are.equal("cancel by " .. who, ops[2])
    assert.are.equal("cancelled by " .. who, st.error)
  end)

  it("asks a live worker that parked the run: it cancels it once, and logs no refusal of it", function()
    local dir, db = setup(30)
    local id = start(dir, db)
    local log = dir .. "/worker.log"
    local p = io.popen(("cd %s && sh -c 'exec %s worker --workflows . --poll 0.02 --park-after 0.1"
      .. " --log-level debug --db %s 2>%s' >/dev/null & echo $!"):format(q(dir), MEND, q(db), q(log)))
    local worker = p:read("l")
    p:close()
    local ok, why = pcall(H.wait_for, "the run to be parked",
                          function() return H.read(log):find("parked", 1, true) end, 20)
    if not ok then kill_dead(worker) error(why, 0) end
    local rc, out, err = mend_in(nil, db, "cancel " .. id)
    if rc ~= 0 then kill_dead(worker) end
    assert.are.equal(0, rc, err)
    assert.matches("it was asked to cancel", out)
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 20")
    signal(worker, "TERM")
    assert.are.equal(3, rc, out .. err)
    local text = H.read(log)
    assert.is_nil(text:find("only a running run can be cancelled", 1, true), text)
    assert.is_nil(text:find('"level":"warn","time":[%d.]+,"event":"operator"'), text)
    local ops = operators(db, id)
    local who = ops[1]:match("^cancel requested by (.+)$")
    assert.are.equal("cancel by " .. who, ops[2])
    assert.are.equal("cancelled by " .. who, json_of(db, "status " .. id).error)
  end)

  it("records the request when the run cannot be carried on here; the next worker cancels it", function()
    local dir, db = setup(30)
    local id = start(dir, db)
    -- Its version's script gone from the store (a database of an older mend), and its file
    -- out of reach of the directory the cancel comes from.
    H.sql(db, "UPDATE workflow_versions SET script = NULL")
    local elsewhere = H.tmp_dir()
    local rc, out, err = mend_in(elsewhere, db, "cancel " .. id)
    assert.are.equal(0, rc, err)
    assert.is_nil(out:find("live worker;", 1, true), out)
    assert.matches("held by no live worker and cannot be carried on here %(workflow \"slow\" is not loaded here%); the cancel is recorded: the worker that next takes the run cancels it", out)
    assert.is_true(json_of(db, "status " .. id).cancel_requested)
    local worker = spawn(dir, db, "worker --workflows . --poll 0.02")
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 20")
    signal(worker, "TERM")
    assert.are.equal(3, rc, out .. err)
    local st = json_of(db, "status " .. id)
    assert.are.equal("failed", st.status)            -- nothing was done: nothing to compensate
    assert.are.equal("cancelled", st.reason)
    assert.are.equal("pending", st.steps[1].status)
    -- the request's note (why it was not done here) is not part of who asked
    local ops = operators(db, id)
    local who = ops[1]:match("^cancel requested by ([^:]+): ")
    assert.matches("%(mend cli%)$", who)
    assert.are.equal("cancel by " .. who, ops[2])
    assert.are.equal("cancelled by " .. who, st.error)
  end)
end)

describe("mend run FILE --key K again", function()
  after_each(H.cleanup)

  it("resumes here a run of that key that no live worker holds, and waits for its end", function()
    local dir, db = setup(30)
    local runner = spawn(dir, db, "run slow.lua --key order-1")
    local id
    for _ = 1, 500 do
      local rc, out = mend_in(nil, db, "runs --json")
      id = rc == 0 and out:match('"id":"(%w+)"')
      if id then break end
      os.execute("sleep 0.02")
    end
    until_status(db, id, step_is("b", "sleeping"))
    kill_dead(runner)
    local rc, out, err = mend_in(dir, db, "run slow.lua --key order-1 --clock virtual")
    assert.are.equal(0, rc, out .. err)
    assert.matches("names the existing run " .. id, err)
    assert.matches("resuming it here", err)
    assert.matches("slow run " .. id .. ": succeeded", out)
    local st = json_of(db, "status " .. id)
    assert.are.equal("succeeded", st.status)
    assert.are.equal(1, st.steps[1].attempts)        -- a was not run again
    assert_ordered(db, id)
  end)

  -- The killed `mend run` carried the child run as well: resumed alone, the parent waited for a
  -- child nobody carried on, and `mend run` for ever.
  it("resumes here too the child runs left unfinished with it", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "nested.lua", [[
return { name = "nested", steps = {
  { name = "kid", when = function(ctx) return not ctx.input.child end, child = "nested",
    input = function() return { child = true } end },
  { name = "nap", when = function(ctx) return ctx.input.child end, sleep = 30 },
} }]])
    local db = H.new_db(dir, "jobs.db")
    local runner = spawn(dir, db, "run nested.lua --key order-1")
    local kid
    for _ = 1, 500 do
      local rc, out = mend_in(nil, db, "runs --json")
      for _, r in ipairs(rc == 0 and json.decode(out) or {}) do
        if r.key and r.key:match("/kid$") then kid = r.id end
      end
      if kid then break end
      os.execute("sleep 0.02")
    end
    until_status(db, kid, step_is("nap", "sleeping"))
    kill_dead(runner)
    local rc, out = H.shell(("cd %s && timeout 20 %s run nested.lua --key order-1 --clock virtual"
      .. " --db %s"):format(q(dir), MEND, q(db)))
    assert.are.equal(0, rc, out)
    assert.matches("its child run " .. kid .. " %(step kid%) was left unfinished too", out)
    for _, r in ipairs(json_of(db, "runs")) do assert.are.equal("succeeded", r.status, r.id) end
  end)

  it("waits for the end of a run that a live worker holds, and says so", function()
    -- The worker's run waits for an event that is sent only once `mend run` says it waits:
    -- the run cannot end before `mend run` has found it held, however slow either starts.
    local dir = H.tmp_dir()
    H.write_file(dir, "slow.lua", (slow(0):gsub("sleep = 0", 'wait_for = "go"')))
    local db = H.new_db(dir, "jobs.db")
    local id = start(dir, db, "--key order-2")
    local worker = spawn(dir, db, "worker --workflows . --poll 0.02")
    finally(function() kill_dead(worker) end)
    until_status(db, id, step_is("b", "waiting"))
    os.execute(("cd %s && sh -c '%s run slow.lua --key order-2 --db %s >out 2>err & echo $! >pid;"
      .. " wait $!; echo $? >rc' &"):format(q(dir), MEND, q(db)))
    H.wait_for("its pid", function() return H.read(dir .. "/pid"):match("%d+") end, 10)
    finally(function()
      if H.read(dir .. "/rc") == "" then kill_dead(H.read(dir .. "/pid"):match("%d+")) end
    end)
    H.wait_for("mend run to say it waits", function()
      return H.read(dir .. "/err"):find("waiting for its end", 1, true) or H.read(dir .. "/rc") ~= ""
    end, 30)
    assert.matches("is held by worker %S+; waiting for its end", H.read(dir .. "/err"))
    assert.are.equal("running", json_of(db, "status " .. id).status)
    local rc, _, err = mend_in(nil, db, "signal " .. id .. " go")
    assert.are.equal(0, rc, err)
    H.wait_for("mend run to end", function() return H.read(dir .. "/rc") ~= "" end, 30)
    signal(worker, "TERM")
    assert.are.equal(0, tonumber(H.read(dir .. "/rc")), H.read(dir .. "/err"))
    assert.matches("slow run " .. id .. ": succeeded", H.read(dir .. "/out"))
  end)
end)

describe("mend run holding a run that another process acts on", function()
  after_each(H.cleanup)

  -- `mend run ARGS` in the background from dir; its pid in dir/pid, its exit code in dir/rc
  -- when it ends. One that has not ended by the test's end is killed.
  local function run_bg(dir, db, args)
    os.execute(("cd %s && sh -c '%s %s --db %s >out 2>err & echo $! >pid; wait $!; echo $? >rc' &")
      :format(q(dir), MEND, args, q(db)))
    H.wait_for("its pid", function() return H.read(dir .. "/pid"):match("%d+") end, 10)
    finally(function()
      if H.read(dir .. "/rc") == "" then kill_dead(H.read(dir .. "/pid"):match("%d+")) end
    end)
  end
  local function exit_code(dir)
    H.wait_for("mend run to end", function() return H.read(dir .. "/rc") ~= "" end, 20)
    return tonumber(H.read(dir .. "/rc"))
  end
  local function the_run(db)
    local id
    H.wait_for("the run", function()
      local rc, out = mend_in(nil, db, "runs --json")
      id = rc == 0 and out:match('"id":"(%w+)"')
      return id
    end, 10)
    return id
  end

  it("takes an event or a token's answer that another process sends (mend signal, mend complete)",
    function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "jobs.db")
    H.write_file(dir, "quest.lua", ([[
local mend = require "mend"
return { name = "quest", steps = {
  { name = "kill", wait_for = "boss_killed" },
  { name = "approve", wait = "token",
    execute = function(ctx) local f = io.open(%q, "w"); f:write(ctx:token()); f:close() end },
} }
]]):format(dir .. "/token"))
    run_bg(dir, db, "run quest.lua --key q-1")
    local id = the_run(db)
    until_status(db, id, step_is("kill", "waiting"))
    local rc, _, err = mend_in(nil, db, "signal " .. id .. [[ boss_killed --data '{"gold":50}']])
    assert.are.equal(0, rc, err)
    until_status(db, id, step_is("approve", "waiting"))
    rc, _, err = mend_in(nil, db, "complete " .. H.read(dir .. "/token") .. [[ --result '{"by":"ana"}']])
    assert.are.equal(0, rc, err)
    assert.are.equal(0, exit_code(dir), H.read(dir .. "/err"))
    local st = json_of(db, "status " .. id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ gold = 50 }, st.steps[1].result)
    assert.are.same({ by = "ana" }, st.steps[2].result)
  end)

  it("carries out a cancel that another process asks for (mend cancel)", function()
    local dir, db = setup(3600)
    run_bg(dir, db, "run slow.lua --key order-9")
    local id = the_run(db)
    until_status(db, id, step_is("b", "sleeping"))
    local rc, out, err = mend_in(nil, db, "cancel " .. id)
    assert.are.equal(0, rc, err)
    assert.matches("asked to cancel", out .. err)
    assert.are.equal(3, exit_code(dir), H.read(dir .. "/err"))
    local st = json_of(db, "status " .. id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
  end)
end)

-- A saga whose refund fails while the flag file exists; its compensation retries wait an hour.
local REFUND = [[
local mend = require "mend"
return { name = "refund", compensate_retry = { max_attempts = 2, initial = 3600, max_delay = 7200, jitter = 0 },
  steps = {
    { name = "reserve", execute = function() return "r" end, compensate = function() end },
    { name = "charge", execute = function() return "c" end,
      compensate = function(ctx)
        local f = io.open(ctx.input.flag)
        if f then f:close(); error(mend.retryable("refund service down")) end
      end },
    { name = "ship", execute = function() error(mend.fatal("no courier")) end },
  } }
]]

local function dead_letter(args)
  local dir = H.tmp_dir()
  local db = H.new_db(dir, "ops.db")
  H.write_file(dir, "refund.lua", REFUND)
  local flag = H.write_file(dir, "refund-down", "")
  local rc, out, err = mend_in(dir, db, "run refund.lua --clock virtual " .. (args or "") ..
                               " --input " .. q('{"flag":"' .. flag .. '"}'))
  assert.are.equal(4, rc, out .. err)
  return dir, db, flag, json_of(db, "dlq")[1].run_id
end

describe("mend dlq retry", function()
  after_each(H.cleanup)

  it("works from any directory, with the script the store keeps for the run's version", function()
    local dir, db, flag, id = dead_letter()
    os.remove(flag)                                  -- the refund service is back
    -- the file changed since (and is not reachable from where the repair runs anyway)
    H.write_file(dir, "refund.lua", "error('not this version')")
    local rc, out, err = mend_in(H.tmp_dir(), db, "dlq retry " .. id)
    assert.are.equal(3, rc, out .. err)
    assert.matches("refund run " .. id .. ": compensated", out)
    assert.are.equal("compensated", json_of(db, "status " .. id).status)
    assert_ordered(db, id)
  end)

  it("says what is missing when neither the script nor the file is at hand", function()
    local _, db, _, id = dead_letter()
    H.sql(db, "UPDATE workflow_versions SET script = NULL")
    local rc, _, err = mend_in(H.tmp_dir(), db, "dlq retry " .. id)
    assert.are.equal(1, rc)
    assert.matches("cannot load the workflow of run " .. id .. ": .*no script of workflow refund"
                   .. " version %x+ is kept; and refund.lua cannot be opened from here", err)
    assert.are.equal("needs_attention", json_of(db, "status " .. id).status)
  end)
end)

describe("mend dlq resolve", function()
  after_each(H.cleanup)

  it("ends the wait of `mend wait` and eng:wait: resolved is an end, exit 3", function()
    local _, db, _, id = dead_letter()
    local rc, out, err = mend_in(nil, db, "dlq resolve " .. id .. " --note 'refunded by hand'")
    assert.are.equal(0, rc, out .. err)
    local t0 = H.wall()
    rc, out, err = mend_in(nil, db, "wait " .. id .. " --timeout 5")
    assert.are.equal(3, rc, out .. err)
    assert.matches("refund run " .. id .. ": resolved", out)
    assert.is_true(H.wall() - t0 < 4, "mend wait waited for a run that had ended")
    local eng = mend.engine{ db = db }
    assert.are.equal("resolved", eng:wait(id, { timeout = 5 }).status)
    eng:close()
  end)
end)

describe("history times", function()
  after_each(H.cleanup)

  it("never go back when a run on the virtual clock is repaired by another process", function()
    local _, db, _, id = dead_letter()
    local last = json_of(db, "history " .. id)
    assert.is_true(last[#last].at > os.time() + 3000)   -- virtual time an hour ahead
    local rc, out, err = mend_in(nil, db, "dlq resolve " .. id .. " --note " .. q("by hand"))
    assert.are.equal(0, rc, out .. err)
    assert_ordered(db, id)
  end)

  it("never go back when a run on the virtual clock is resumed by a new engine", function()
    local def = { name = "naps", steps = {
      { name = "a", sleep = 3600 }, { name = "b", sleep = 3600 },
      { name = "c", execute = function() return 1 end } } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("naps", {})
    eng:advance(3700)                              -- a slept, b sleeps: an hour ahead of real time
    eng:close()
    local again = H.reopen(db)
    again:register(def)
    assert.are.equal(1, again:recover())
    again:run()
    assert.are.equal("succeeded", again:status(id).status)
    local prev
    for _, h in ipairs(again:history(id)) do
      if prev then assert.is_true(h.at >= prev, ("row %d (%s) at %.3f before %.3f"):format(h.seq, h.event, h.at, prev)) end
      prev = h.at
    end
  end)

  it("never go back when a virtual-clock run is retried by a new engine", function()
    local dir, db, flag, id = dead_letter()
    os.remove(flag)
    local rc, out, err = mend_in(dir, db, "dlq retry " .. id)
    assert.are.equal(3, rc, out .. err)
    assert_ordered(db, id)
  end)
end)

describe("a wait longer than any clock", function()
  after_each(H.cleanup)

  it("sleep = 1e308: status and history show the run, as text and JSON", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "far.db")
    H.write_file(dir, "far.lua", [[
return { name = "far", steps = {
  { name = "a", execute = function() return 1 end },
  { name = "b", sleep = 1e308 } } }]])
    local rc, out, err = mend_in(dir, db, "start far --workflows .")
    assert.are.equal(0, rc, err)
    local id = out:match("(%S+)")
    local worker = spawn(dir, db, "worker --workflows . --poll 0.02")
    until_status(db, id, step_is("b", "sleeping"))
    signal(worker, "TERM")
    rc, out, err = mend_in(nil, db, "status " .. id)
    assert.are.equal(0, rc, err)
    assert.matches("due: b sleeping, due 1e%+308", out)
    rc, out, err = mend_in(nil, db, "history " .. id)
    assert.are.equal(0, rc, err)
    assert.matches("delay 1e%+308s", out)
    assert.is_true(json_of(db, "status " .. id).steps[2].due >= 1e308)
    local history = json_of(db, "history " .. id)
    assert.are.equal("sleeping", history[#history].to)
    -- the same on the virtual clock, which gets there at once
    rc, out, err = mend_in(dir, db, "run far.lua --clock virtual")
    assert.are.equal(0, rc, out .. err)
    local vid = out:match("far run (%S+): succeeded")
    assert.truthy(vid, out)
    rc, out, err = mend_in(nil, db, "history " .. vid)
    assert.are.equal(0, rc, err)
    assert.matches("%+1e%+308s%s+b%s+sleeping %-> pending", out)
  end)

  it("sleep = math.huge is refused when the workflow loads, naming the step", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "inf.lua", [[return { name = "inf", steps = { { name = "b", sleep = math.huge } } }]])
    local rc, _, err = mend_in(dir, H.new_db(dir, "inf.db"), "run inf.lua --clock virtual")
    assert.are.equal(1, rc)
    assert.matches('step "b": sleep must be a finite number of seconds, got inf', err)
  end)
end)

describe("breakers", function()
  after_each(H.cleanup)

  it("a step that waited to retry goes straight to breaker_open while its breaker is open", function()
    local eng = H.new_engine()
    local calls = 0
    eng:register{ name = "flaky", retry = { max_attempts = 10, initial = 1, jitter = 0 },
      steps = { { name = "call", breaker = { key = "dep", failure_threshold = 2, open_seconds = 30 },
        execute = function()
          calls = calls + 1
          if calls <= 2 then error(mend.retryable("down")) end
          return "ok"
        end } } }
    local id = eng:start("flaky", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local t = H.transitions(eng, id, "call")
    local i = assert(H.index_of(t, "retry_wait->breaker_open"), table.concat(t, " "))
    assert.are.equal("breaker_open->pending", t[i + 1])
    for k = 1, #t - 1 do
      assert.is_false(t[k] == "retry_wait->pending" and t[k + 1] == "pending->breaker_open",
                      table.concat(t, " "))
    end
  end)

  it("mend breakers shows an open breaker whose time is up as half-open", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "b.db")
    H.write_file(dir, "one.lua", [[return { name = "one", steps = {
      { name = "call", breaker = "psp", execute = function() return 1 end } } }]])
    local rc, out, err = mend_in(dir, db, "run one.lua")
    assert.are.equal(0, rc, err)
    rc, out, err = mend_in(nil, db, "breakers open psp --for 60")
    assert.are.equal(0, rc, err)
    rc, out = mend_in(nil, db, "breakers")
    assert.matches("psp%s+open%s+0%s+0%s+%d%d%d%d%-", out)
    rc, out, err = mend_in(nil, db, "breakers open psp --for 0.05")
    assert.are.equal(0, rc, err)
    os.execute("sleep 0.1")
    rc, out = mend_in(nil, db, "breakers")
    assert.matches("psp%s+half_open%s+0%s+0%s+%-", out)
    for _, b in ipairs(json_of(db, "breakers")) do
      if b.key == "psp" then assert.are.equal("half_open", b.state) end
    end
  end)
end)
