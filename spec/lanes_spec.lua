-- Completion tokens and child runs as branches of a parallel group (issues 18 and 21): a
-- branch may hand out a token or start a child run and wait, side by side with its siblings;
-- a completion or a child's end sent from another process wakes that branch, also across a
-- worker restart; a group that fails for good stops a branch waiting for its token (the token
-- is refused afterwards), cancels a running child, and compensates a child that succeeded as
-- a whole. With real `mend worker` processes and the `mend complete` / `mend fail` commands;
-- a map's step is refused both (its items share one step's name).
local H = require "spec.helper"
local json = require("mend").json

local MEND = H.MEND
local q = H.quote

local SHIPPING = [[
return { name = "shipping", steps = {
  { name = "pack", execute = function(ctx, input)
      if input.broken then error(require("mend").fatal("nothing to pack")) end
      return { box = "box-" .. input.order }
    end,
    compensate = function(ctx, r) ctx:log("unpacked %s", r.box) end },
  { name = "pickup", when = function(ctx) return ctx.input.pickup end, wait_for = "picked_up" },
  { name = "label", execute = function(ctx, input) return { tracking = "trk-" .. input.order } end },
} }
]]

-- Branches that wait for tokens: each logs the token it hands out.
local function token_branch(name, compensate)
  return ([[
    { name = %q, wait = "token", timeout = 3600,
      execute = function(ctx) ctx:log("token %%s", ctx:token()) return "asked" end%s },
]]):format(name, compensate and [[,
      compensate = function(ctx) ctx:log("withdrawn ]] .. name .. [[") end]] or "")
end

local TOKENS = [[
return { name = "tokens", steps = {
  { name = "charge", execute = function() return { charged = 5 } end,
    compensate = function(ctx) ctx:log("refunded") end },
  { name = "prepare", parallel = {
]] .. token_branch("approve", true) .. [[
    { name = "cool", sleep = 3600 },   -- asleep until a worker on the virtual clock takes it
  } },
  { name = "done", execute = function(ctx) return { approved = ctx.results.prepare.approve } end },
} }
]]

local VOTES = [[
return { name = "votes", steps = {
  { name = "charge", execute = function() return { charged = 5 } end,
    compensate = function(ctx) ctx:log("refunded") end },
  { name = "vote", parallel = {
]] .. token_branch("approve", true) .. token_branch("veto") .. token_branch("audit") .. [[
  } },
} }
]]

-- ship (a child run) beside a token: the child's input says whether it waits for a pickup or
-- fails; the token fails the group when a person says so.
local ORDER = [[
return { name = "order", steps = {
  { name = "charge", execute = function() return { charged = 5 } end,
    compensate = function(ctx) ctx:log("refunded") end },
  { name = "prepare", parallel = {
    { name = "ship", child = "shipping", input = function(ctx) return ctx.input end },
]] .. token_branch("approve", true) .. [[
    { name = "stock", execute = function() return { reserved = 1 } end,
      compensate = function(ctx) ctx:log("released stock") end },
  } },
  { name = "done", execute = function(ctx) return { tracking = ctx.results.prepare.ship.label.tracking } end },
} }
]]

local mend_cmd = H.mend_cmd

local worker = H.spawn_worker

-- A worker on the virtual clock (its stderr appended to LOG too): a durable sleep comes due
-- at once there, so the tokens workflow's "cool" ends when the test wants, never before.
local function virtual_worker(db, dir, log)
  local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 --clock virtual"
    .. " 2>>%s' >/dev/null & echo $!"):format(MEND, q(db), q(dir), q(log)))
  local pid = p:read("l")
  p:close()
  return pid
end

local status_json = H.status_json

-- A step of the status, a branch by its full name ("prepare/ship") from the nested JSON.
local function step_of(st, name)
  for _, s in ipairs(st.steps or {}) do
    if s.name == name then return s end
    for _, b in ipairs(s.branches or {}) do
      if b.step == name then return b end
    end
  end
end

local function step(db, id, name) return step_of(status_json(db, id), name) or {} end

-- The last token the branch `name` of run `id` logged: the worker's log is where a person
-- reads it (the store keeps only its digest).
local function token_of(log, id, name)
  local token
  for line in H.read(log):gmatch("[^\n]+") do
    local ok, e = pcall(json.decode, line)
    if ok and type(e) == "table" and e.run == id and (e.step == name or e.step == name:match("[^/]+$")) then
      token = tostring(e.message):match("^token (mtk_%x+)") or token
    end
  end
  return token
end

local function setup()
  local dir = H.tmp_dir()
  H.write_file(dir, "shipping.lua", SHIPPING)
  H.write_file(dir, "tokens.lua", TOKENS)
  H.write_file(dir, "votes.lua", VOTES)
  H.write_file(dir, "order.lua", ORDER)
  return dir, H.new_db(dir, "l.db"), dir .. "/worker.log"
end

local function start(db, dir, wf, input)
  local rc, out = mend_cmd(db, "start " .. wf .. " --workflows " .. q(dir)
    .. (input and (" --input '" .. input .. "'") or ""))
  assert.are.equal(0, rc, out)
  return out:match("(%S+)")
end

local function wait_status(db, id, name, status)
  H.wait_for(name .. " " .. status, function() return step(db, id, name).status == status end, 15)
end

describe("a token branch of a parallel group", function()
  after_each(H.cleanup)

  it("is completed from another process while its sibling sleeps", function()
    local dir, db, log = setup()
    local id = start(db, dir, "tokens")
    local pid = worker(db, dir, log)
    wait_status(db, id, "prepare/approve", "waiting")
    local rc, out = mend_cmd(db, "status " .. id)
    assert.matches("due: prepare/approve waiting for a token, due ", out)
    assert.are.equal("sleeping", step(db, id, "prepare/cool").status)
    rc, out = mend_cmd(db, "complete " .. token_of(log, id, "prepare/approve") .. [[ --result '{"by":"alice"}']])
    assert.are.equal(0, rc, out)
    assert.matches("token completed: run " .. id, out)
    -- the token's branch goes on at once, its sibling still asleep; a worker on the virtual
    -- clock then has the sleep come due at once
    wait_status(db, id, "prepare/approve", "succeeded")
    assert.are.equal("sleeping", step(db, id, "prepare/cool").status)
    H.stop_worker(pid)
    pid = virtual_worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 20")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    -- the token's branch went on at once; the group waited for the sleep
    rc, out = mend_cmd(db, "history " .. id .. " --json")
    assert.are.equal(0, rc, out)
    local ended = {}
    for n, row in ipairs(json.decode(out)) do
      if row.event == "step" and row.to == "succeeded" then ended[row.step] = n end
    end
    assert.is_true(ended["prepare/approve"] < ended["prepare/cool"], out)
    assert.is_true(ended["prepare/cool"] < ended["prepare"], out)
    local st = status_json(db, id)
    assert.are.same({ approved = { by = "alice" } }, step_of(st, "done").result)
    assert.are.equal("succeeded", step_of(st, "prepare/cool").status)
  end)

  it("keeps a completion sent while no worker runs for the next worker (a restart mid-group)",
     function()
    local dir, db, log = setup()
    local id = start(db, dir, "tokens")
    local pid = worker(db, dir, log)
    wait_status(db, id, "prepare/approve", "waiting")
    H.stop_worker(pid)
    local rc, out = mend_cmd(db, "complete " .. token_of(log, id, "prepare/approve") .. [[ --result '"ok"']])
    assert.are.equal(0, rc, out)
    assert.are.equal("waiting", step(db, id, "prepare/approve").status)
    pid = virtual_worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 20")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.same({ approved = "ok" }, step_of(st, "done").result)
    -- one execute of the branch: the restart took its wait up, not its attempt
    assert.are.equal(1, step_of(st, "prepare/approve").attempts)
    assert.are.equal(1, #H.sql(db, ("SELECT digest FROM tokens WHERE run_id = '%s'"):format(id)))
  end)

  it("wakes the branch its token names; a failed one stops the group, whose waiting token is"
     .. " refused afterwards", function()
    local dir, db, log = setup()
    local id = start(db, dir, "votes")
    local pid = worker(db, dir, log)
    for _, b in ipairs { "approve", "veto", "audit" } do wait_status(db, id, "vote/" .. b, "waiting") end
    -- completed first, while the other two wait: only approve goes on
    local rc, out = mend_cmd(db, "complete " .. token_of(log, id, "vote/approve") .. " --result 1")
    assert.are.equal(0, rc, out)
    wait_status(db, id, "vote/approve", "succeeded")
    assert.are.equal("waiting", step(db, id, "vote/veto").status)
    assert.are.equal("waiting", step(db, id, "vote/audit").status)
    rc, out = mend_cmd(db, "fail " .. token_of(log, id, "vote/veto") .. " --kind fatal --message 'vetoed'")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.matches("fatal: vetoed", step_of(st, "vote/veto").error)
    assert.are.equal("pending", step_of(st, "vote/audit").status)
    assert.are.equal("compensated", step_of(st, "vote/approve").status)
    assert.are.equal("compensated", step_of(st, "charge").status)
    rc, out = mend_cmd(db, "history " .. id)
    assert.matches("stopped: another branch failed for good", out)
    rc, out = mend_cmd(db, "complete " .. token_of(log, id, "vote/audit"))
    assert.are.equal(1, rc, out)
    assert.matches("run " .. id .. " is compensated: its tokens are of no use any more", out)
  end)
end)

describe("a token branch of a group that fails for good (virtual clock)", function()
  after_each(H.cleanup)

  -- tok waits for its token while bad retries; bad's second attempt fails for good
  local function def(log)
    return { name = "race", steps = {
      { name = "g", parallel = {
        { name = "tok", wait = "token", timeout = 3600,
          execute = function(ctx) log.token = ctx:token() end,
          compensate = function(_, r) log[#log + 1] = "undo tok " .. tostring(r) end },
        { name = "bad", retry = { max_attempts = 2, initial = 5, jitter = 0 },
          execute = function(ctx)
            if ctx.attempt == 1 then error(require("mend").retryable("busy")) end
            error(require("mend").fatal("sold out"))
          end },
      } } } }
  end

  it("takes an outcome accepted before the group stopped, and compensates it", function()
    local log = {}
    local eng, db = H.new_engine()
    eng:register(def(log))
    local id = eng:start("race", {})
    eng:advance(1)
    assert.are.equal("waiting", H.step(eng:status(id), "g/tok").status)
    -- completed by another process: this engine learns of it from its inbox only
    local other = H.reopen(db)
    assert.are.equal(id, other:complete(log.token, "yes"))
    assert.are.equal("waiting", H.step(eng:status(id), "g/tok").status)
    eng:advance(10)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("compensated", H.step(st, "g/tok").status)
    assert.are.same({ "undo tok yes" }, { log[1] })
  end)

  it("stops a branch whose token has no outcome yet: the token is refused afterwards", function()
    local log = {}
    local eng = H.new_engine()
    eng:register(def(log))
    local id = eng:start("race", {})
    eng:advance(10)
    eng:run()
    local st = eng:status(id)
    assert.are.equal("failed", st.status)
    assert.are.equal("pending", H.step(st, "g/tok").status)
    local ok, err = pcall(eng.complete, eng, log.token, "late")
    assert.is_false(ok)
    assert.matches("its tokens are of no use any more", tostring(err))
    assert.are.equal(0, #log)
  end)
end)

describe("a token branch whose execute ends after its group failed (virtual clock)", function()
  after_each(H.cleanup)

  it("does not wait for its token: it stops, and the token is refused", function()
    local log = {}
    local eng = H.new_engine()
    eng:register { name = "late", steps = {
      { name = "g", parallel = {
        { name = "tok", wait = "token", timeout = 3600,
          execute = function(ctx)
            log.token = ctx:token()
            require("mend").sleep(5)   -- its attempt is in flight when bad fails
          end },
        { name = "bad", execute = function() error(require("mend").fatal("sold out")) end },
      } } } }
    local t0 = eng:now()
    local id = eng:start("late", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("failed", st.status)
    assert.are.equal("pending", H.step(st, "g/tok").status)
    assert.is_true(eng:now() - t0 < 3600, "no wait for the token's timeout")
    assert.is_false((pcall(eng.complete, eng, log.token, "late")))
  end)
end)

describe("a child branch of a parallel group", function()
  after_each(H.cleanup)

  local function child_of(db, id)
    local c
    H.wait_for("the child", function()
      c = (status_json(db, id).children or {})[1]
      return c ~= nil
    end, 15)
    return c
  end

  it("starts its child keyed by run, group and branch, and takes its results; status links it",
     function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o1","pickup":true}')
    local pid = worker(db, dir, log)
    local c = child_of(db, id)
    assert.are.equal("prepare/ship", c.step)
    assert.are.equal("shipping", c.workflow)
    wait_status(db, c.run_id, "pickup", "waiting")
    local rc, out = mend_cmd(db, "status " .. id)
    assert.matches("due: prepare/ship waiting for child run " .. c.run_id .. " %(shipping%), no timeout", out)
    assert.matches("children:\n  prepare/ship%s+" .. c.run_id .. "%s+shipping%s+running", out)
    rc, out = mend_cmd(db, "status " .. c.run_id)
    assert.matches("parent:\n  " .. id .. " %(step prepare/ship%)", out)
    assert.are.equal(id .. "/prepare/ship", status_json(db, c.run_id).key)
    -- the child's event comes from another process; the token too
    assert.are.equal(0, (mend_cmd(db, "signal " .. c.run_id .. " picked_up")))
    wait_status(db, id, "prepare/ship", "succeeded")
    rc, out = mend_cmd(db, "complete " .. token_of(log, id, "prepare/approve"))
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.same({ tracking = "trk-o1" }, step_of(st, "done").result)
    assert.are.same({ box = "box-o1" }, step_of(st, "prepare/ship").result.pack)
    assert.are.equal("succeeded", status_json(db, c.run_id).status)
  end)

  it("waits for its child across a worker restart", function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o6","pickup":true}')
    local pid = worker(db, dir, log)
    local c = child_of(db, id)
    wait_status(db, c.run_id, "pickup", "waiting")
    wait_status(db, id, "prepare/approve", "waiting")
    H.stop_worker(pid)
    -- both sent while no worker runs: the next one carries the child on, and its parent's lanes
    assert.are.equal(0, (mend_cmd(db, "signal " .. c.run_id .. " picked_up")))
    assert.are.equal(0, (mend_cmd(db, "complete " .. token_of(log, id, "prepare/approve"))))
    pid = worker(db, dir, log)
    local rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.same({ tracking = "trk-o6" }, step_of(st, "done").result)
    assert.are.equal(1, #st.children)
  end)

  it("fails the group when its child fails; the other branches and earlier steps are compensated",
     function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o2","broken":true}')
    local pid = worker(db, dir, log)
    local rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.matches("child run %w+ failed: fatal: nothing to pack", step_of(st, "prepare/ship").error)
    assert.are.equal("compensated", step_of(st, "prepare/stock").status)
    assert.are.equal("compensated", step_of(st, "charge").status)
    assert.are.equal("failed", status_json(db, st.children[1].run_id).status)
    rc, out = mend_cmd(db, "history " .. id)
    assert.matches("released stock", H.read(log))
  end)

  it("is compensated as a whole when another branch fails for good after it succeeded", function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o3"}')
    local pid = worker(db, dir, log)
    wait_status(db, id, "prepare/ship", "succeeded")
    wait_status(db, id, "prepare/approve", "waiting")
    local rc, out = mend_cmd(db, "fail " .. token_of(log, id, "prepare/approve") .. " --kind fatal --message no")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", step_of(st, "prepare/ship").status)
    local child = st.children[1].run_id
    rc, out = mend_cmd(db, "wait " .. child .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local cs = status_json(db, child)
    assert.are.equal("compensated", cs.status)
    assert.are.equal("parent_compensated", cs.reason)
    assert.matches("unpacked box%-o3", H.read(log))
  end)

  it("is cancelled, running, when the group fails for good; the group waits for its end", function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o4","pickup":true}')
    local pid = worker(db, dir, log)
    local c = child_of(db, id)
    wait_status(db, c.run_id, "pickup", "waiting")
    wait_status(db, id, "prepare/approve", "waiting")
    local rc, out = mend_cmd(db, "fail " .. token_of(log, id, "prepare/approve") .. " --kind fatal --message no")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    assert.are.equal(3, rc, out .. H.read(log))
    rc, out = mend_cmd(db, "wait " .. c.run_id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local cs = status_json(db, c.run_id)
    assert.are.equal("cancelled", cs.reason)
    assert.matches("unpacked box%-o4", H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.matches("fatal: no", st.error)
    assert.are.equal("failed", step_of(st, "prepare/ship").status)
    assert.are.equal("compensated", step_of(st, "prepare/stock").status)
  end)
end)

describe("a cancelled run with a child branch", function()
  after_each(H.cleanup)

  it("cancels the running child with it", function()
    local dir, db, log = setup()
    local id = start(db, dir, "order", '{"order":"o5","pickup":true}')
    local pid = worker(db, dir, log)
    local c
    H.wait_for("the child", function()
      c = (status_json(db, id).children or {})[1]
      return c ~= nil and step(db, c.run_id, "pickup").status == "waiting"
    end, 15)
    local rc, out = mend_cmd(db, "cancel " .. id)
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 15")
    assert.are.equal(3, rc, out .. H.read(log))
    rc, out = mend_cmd(db, "wait " .. c.run_id .. " --timeout 15")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    assert.are.equal("cancelled", status_json(db, c.run_id).reason)
    assert.matches("unpacked box%-o5", H.read(log))
  end)
end)

describe("a map's step", function()
  after_each(H.cleanup)

  it("cannot wait for a token or be a child run: a load error names the map", function()
    local dir = H.tmp_dir()
    for what, field in pairs { token = [[wait = "token", execute = function() end]],
                               child = [[child = "shipping"]] } do
      local path = H.write_file(dir, what .. ".lua", ([[
return { name = "m", steps = { { name = "items", map = function() return { 1 } end,
  step = { %s } } } }
]]):format(field))
      local rc, out = H.shell(("%s run %s --db %s"):format(MEND, q(path), q(H.new_db(dir, what .. ".db"))))
      assert.are.equal(1, rc, out)
      assert.matches('step "items": step: ' .. (what == "child" and "child" or 'wait = "token"')
                     .. " cannot go in a map's step", out)
    end
  end)
end)
