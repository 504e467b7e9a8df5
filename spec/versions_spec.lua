-- Versions (SPEC section 13): a run executes the version of its workflow it started with,
-- however the file changes while it is in flight; a run whose version cannot be loaded is
-- flagged once with its reason; `mend upgrade` moves runs to another version on purpose, and
-- `mend workflows` lists versions. Real `mend worker` processes, real files, real databases.
local H = require "spec.helper"
local mend = require "mend"
local json = mend.json

local MEND, q = H.MEND, H.quote

local function mend_cmd(db, args) return H.mend_in(nil, db, args) end

local function ok_cmd(db, args)
  local rc, out, err = mend_cmd(db, args)
  assert.are.equal(0, rc, args .. ": " .. out .. err)
  return out
end

local function json_of(db, args) return json.decode(ok_cmd(db, args .. " --json")) end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- A worker in the background, its log (JSON lines) in `log`; returns its pid. `extra`: more
-- flags.
local function worker(db, dir, log, extra)
  local p = io.popen(("sh -c 'exec %s worker --db %s --workflows %s --poll 0.05 --log-level debug"
    .. " --alert-command \"cat >> %s\" %s 2>>%s' >/dev/null & echo $!")
    :format(MEND, q(db), q(dir), q(dir .. "/../alerts"), extra or "", q(log)))
  local pid = p:read("l")
  p:close()
  return pid
end

local stop = H.stop_worker   -- the worker gives its runs back and exits

local function until_true(what, pred)
  for _ = 1, 500 do
    if pred() then return end
    os.execute("sleep 0.02")
  end
  error("never: " .. what)
end

local function step_status(db, id, name)
  for _, s in ipairs(json_of(db, "status " .. id).steps) do
    if s.name == name then return s.status end
  end
end

local function results(st)
  local names, res = {}, {}
  for _, s in ipairs(st.steps) do
    names[#names + 1] = s.name
    res[s.name] = s.result
  end
  return table.concat(names, ","), res
end

-- A workflow whose steps are given as {name, value} (a step returning "value") or {name} for a
-- durable sleep of `nap` seconds.
local function workflow(name, steps, nap)
  local lines = { "return { name = " .. ("%q"):format(name) .. ", steps = {" }
  for _, s in ipairs(steps) do
    if s[2] then
      lines[#lines + 1] = ("  { name = %q, execute = function() return %q end },"):format(s[1], s[2])
    else
      lines[#lines + 1] = ("  { name = %q, sleep = %s },"):format(s[1], nap)
    end
  end
  lines[#lines + 1] = "} }\n"
  return table.concat(lines, "\n")
end

describe("versions: in-flight runs keep their code", function()
  local dir, db, wf, log

  before_each(function()
    dir = H.tmp_dir()
    db, wf, log = H.new_db(dir, "v.db"), dir .. "/wf", dir .. "/worker.log"
    os.execute("mkdir -p " .. q(wf))
  end)

  after_each(H.cleanup)

  it("finishes each old run with its own version after a body change, a rename, an insert and a removal", function()
    -- The first worker leaves every run asleep in b, however long `mend status` takes to see
    -- it (each look is a new process: on a loaded machine a 1.5 s nap ended unseen); the
    -- second, on the virtual clock, has the naps come due at once.
    local NAP = 3600
    local v1 = { { "a", "v1-a" }, { "b" }, { "c", "v1-c" } }
    local v2 = {
      body = { { "a", "v2-a" }, { "b" }, { "c", "v2-c" } },
      rename = { { "a", "v2-a" }, { "b" }, { "c2", "v2-c2" } },
      insert = { { "a", "v2-a" }, { "b" }, { "x", "v2-x" }, { "c", "v2-c" } },
      remove = { { "a", "v2-a" }, { "b" } },
    }
    local kinds = { "body", "rename", "insert", "remove" }
    for _, k in ipairs(kinds) do write(wf .. "/" .. k .. ".lua", workflow(k, v1, NAP)) end
    local old = {}
    for _, k in ipairs(kinds) do old[k] = ok_cmd(db, ("start %s --workflows %s"):format(k, q(wf))):match("%S+") end
    local w1 = worker(db, wf, log)
    for _, k in ipairs(kinds) do
      until_true(k .. " sleeping in b", function() return step_status(db, old[k], "b") == "sleeping" end)
    end
    stop(w1)
    -- while they sleep, every file changes
    for _, k in ipairs(kinds) do write(wf .. "/" .. k .. ".lua", workflow(k, v2[k], NAP)) end
    local new = {}
    for _, k in ipairs(kinds) do new[k] = ok_cmd(db, ("start %s --workflows %s"):format(k, q(wf))):match("%S+") end
    local w2 = worker(db, wf, log, "--clock virtual")
    for _, k in ipairs(kinds) do
      ok_cmd(db, "wait " .. old[k] .. " --timeout 20")
      ok_cmd(db, "wait " .. new[k] .. " --timeout 20")
    end
    stop(w2)

    local expect_new = {
      body = { "a,b,c", { a = "v2-a", c = "v2-c" } },
      rename = { "a,b,c2", { a = "v2-a", c2 = "v2-c2" } },
      insert = { "a,b,x,c", { a = "v2-a", x = "v2-x", c = "v2-c" } },
      remove = { "a,b", { a = "v2-a" } },
    }
    for _, k in ipairs(kinds) do
      local st = json_of(db, "status " .. old[k])
      assert.are.equal("succeeded", st.status, k)
      local names, res = results(st)
      assert.are.equal("a,b,c", names, k)
      assert.are.same({ a = "v1-a", c = "v1-c" }, res, k)   -- the old code, to its end
      local nst = json_of(db, "status " .. new[k])
      assert.are.equal("succeeded", nst.status, k)
      names, res = results(nst)
      assert.are.equal(expect_new[k][1], names, k)
      assert.are.same(expect_new[k][2], res, k)
      assert.are_not.equal(st.version, nst.version, k)
      -- the history says which version carried the old run on after the change
      -- (claimed by the first worker, recovered by the second)
      local takes, events = {}, {}
      for _, h in ipairs(json_of(db, "history " .. old[k])) do
        if h.event == "claimed" or h.event == "recovered" then
          takes[#takes + 1], events[#events + 1] = h.detail, h.event
        end
      end
      assert.is_true(#takes >= 2, k .. ": " .. table.concat(events, ", "))
      assert.are.equal("claimed", events[1], k)
      assert.are.equal("recovered", events[#events], k)
      assert.truthy(takes[#takes]:find("version " .. st.version, 1, true), takes[#takes])
    end
    -- no worker complained about step lists
    assert.is_nil(H.slurp(log):find("in the run but", 1, true))

    -- mend workflows: both versions of each, none unfinished
    local list = json_of(db, "workflows")
    local seen = {}
    for _, v in ipairs(list) do
      seen[v.workflow] = (seen[v.workflow] or 0) + 1
      assert.are.equal(0, v.unfinished)
      assert.is_true(v.kept)
    end
    for _, k in ipairs(kinds) do assert.are.equal(2, seen[k], k) end
    local text = ok_cmd(db, "workflows --workflow rename")
    local st = json_of(db, "status " .. new.rename)
    assert.truthy(text:find("rename%s+" .. st.version .. ".-%(newest%)"), text)
  end)

  it("flags a run whose version cannot be loaded once, and upgrade moves it or is refused", function()
    -- asleep in b until the first worker is stopped, however slow the look; the later
    -- workers, on the virtual clock, have the nap come due at once
    local NAP = 3600
    write(wf .. "/u.lua", workflow("u", { { "a", "v1-a" }, { "b" }, { "c", "v1-c" } }, NAP))
    local id = ok_cmd(db, "start u --workflows " .. q(wf)):match("%S+")
    local w1 = worker(db, wf, log)
    until_true("b sleeping", function() return step_status(db, id, "b") == "sleeping" end)
    stop(w1)
    local v1 = json_of(db, "status " .. id).version
    -- a database from a mend that kept no scripts, and the file changed: v1 is nowhere
    H.sql(db, "UPDATE workflow_versions SET script = NULL")
    write(wf .. "/u.lua", workflow("u", { { "a", "v2-a" }, { "b" }, { "c", "v2-c" } }, NAP))
    local w2 = worker(db, wf, log, "--clock virtual")
    until_true("flagged", function() return #json_of(db, "runs --attention") == 1 end)
    os.execute("sleep 0.5")   -- ten polls
    local w3 = worker(db, wf, log, "--clock virtual")   -- another worker looks at it on its first poll
    -- the flag's alert is logged and sent after its commit, the command's output comes later
    -- still, and the second worker's look is a line of the log: waited for, however slow
    local function lines_of(pattern)
      local _, n = H.slurp(log):gsub(pattern, "")
      return n
    end
    until_true("the alert sent", function() return H.slurp(dir .. "/alerts"):find("\n") ~= nil end)
    until_true("the alert logged", function() return lines_of('"event":"alert"') >= 1 end)
    until_true("the second worker's look", function()
      return lines_of('"event":"recover","message":"workflow u version [^\n]*cannot be loaded') >= 2
    end)

    local st = json_of(db, "status " .. id)
    assert.are.equal("running", st.status)
    assert.truthy(st.unavailable:find("version " .. v1 .. " cannot be loaded", 1, true), st.unavailable)
    assert.truthy(st.unavailable:find("no script", 1, true), st.unavailable)
    local runs = json_of(db, "runs --attention")
    assert.are.equal(id, runs[1].id)
    local _, listed = mend_cmd(db, "runs --attention")
    assert.truthy(listed:find("workflow_unavailable", 1, true), listed)
    -- one alert, in the history, to the command, and one line in the logs of both workers
    local alerts = 0
    for _, h in ipairs(json_of(db, "history " .. id)) do
      if h.event == "alert" then alerts = alerts + 1 end
    end
    assert.are.equal(1, alerts)
    local sent = H.slurp(dir .. "/alerts")
    local _, nsent = sent:gsub("workflow_unavailable", "")
    assert.are.equal(1, nsent, sent)
    local loud = {}
    for line in H.slurp(log):gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.run == id and (e.level == "warn" or e.level == "error") then
        loud[#loud + 1] = e.event
      end
    end
    table.sort(loud)
    assert.are.same({ "alert", "recover" }, loud)   -- the reason, and the alert: once each

    -- upgrade: refused when the steps begun are not kept, naming the step
    local moved = dir .. "/moved.lua"
    write(moved, workflow("u", { { "a2", "v3-a" }, { "b" }, { "c", "v3-c" } }, NAP))
    local rc, _, err = mend_cmd(db, "upgrade " .. id .. " --file " .. q(moved))
    assert.are.equal(1, rc)
    assert.truthy(err:find('step #1 is "a" in run ' .. id .. ' but "a2"', 1, true), err)
    write(moved, workflow("u", { { "a", "v3-a" } }, NAP))
    rc, _, err = mend_cmd(db, "upgrade " .. id .. " --file " .. q(moved))
    assert.are.equal(1, rc)
    assert.truthy(err:find('step #2 "b" has begun', 1, true), err)
    assert.are.equal(v1, json_of(db, "status " .. id).version)
    -- accepted: the live workers take it at their next poll and finish it with that version
    write(moved, workflow("u", { { "a", "v3-a" }, { "b" }, { "c3", "v3-c3" } }, NAP))
    local out = ok_cmd(db, "upgrade " .. id .. " --file " .. q(moved))
    assert.truthy(out:find(v1 .. " -> ", 1, true), out)
    ok_cmd(db, "wait " .. id .. " --timeout 20")
    stop(w2)
    stop(w3)
    st = json_of(db, "status " .. id)
    assert.are.equal("succeeded", st.status)
    local names, res = results(st)
    assert.are.equal("a,b,c3", names)
    assert.are.same({ a = "v1-a", c3 = "v3-c3" }, res)
    assert.is_nil(st.unavailable)
    local upgraded
    for _, h in ipairs(json_of(db, "history " .. id)) do
      if h.event == "operator" and h.detail:find("^upgrade by ") then upgraded = h.detail end
    end
    assert.truthy(upgraded and upgraded:find("version " .. v1 .. " -> " .. st.version, 1, true), upgraded)
    assert.are.equal(0, #json_of(db, "runs --attention"))
    -- mend workflows shows the three versions (the first without its script)
    local text = ok_cmd(db, "workflows")
    assert.truthy(text:find(v1 .. ".-no script kept"), text)
    assert.truthy(text:find(st.version .. ".-moved%.lua"), text)
  end)

  it("resolves or cancels a run that cannot progress; refuses an upgrade under a live worker", function()
    local NAP = 3600   -- asleep in b while the first worker holds it, however slow the looks
    write(wf .. "/r.lua", workflow("r", { { "a", "v1-a" }, { "b" }, { "c", "v1-c" } }, NAP))
    local id1 = ok_cmd(db, "start r --workflows " .. q(wf)):match("%S+")
    local id2 = ok_cmd(db, "start r --workflows " .. q(wf)):match("%S+")
    local w1 = worker(db, wf, log)
    for _, id in ipairs{ id1, id2 } do
      until_true("b sleeping", function() return step_status(db, id, "b") == "sleeping" end)
    end
    -- a run a live worker holds runs the code it has: not moved under it
    local rc, _, err = mend_cmd(db, "upgrade " .. id1 .. " --file " .. q(wf .. "/r.lua"))
    assert.are.equal(0, rc, err)   -- the same version: nothing to move
    write(dir .. "/r3.lua", workflow("r", { { "a", "v3-a" }, { "b" }, { "c", "v3-c" } }, NAP))
    rc, _, err = mend_cmd(db, "upgrade " .. id1 .. " --file " .. q(dir .. "/r3.lua"))
    assert.are.equal(1, rc)
    assert.truthy(err:find("held by worker", 1, true), err)
    stop(w1)
    H.sql(db, "UPDATE workflow_versions SET script = NULL")
    write(wf .. "/r.lua", workflow("r", { { "a", "v2-a" }, { "b" }, { "c", "v2-c" } }, NAP))
    local w2 = worker(db, wf, log)
    until_true("flagged", function() return #json_of(db, "runs --attention") == 2 end)
    local out = ok_cmd(db, "dlq resolve " .. id1 .. " --note " .. q("done by hand"))
    assert.truthy(out:find("resolved", 1, true), out)
    local st = json_of(db, "status " .. id1)
    assert.are.equal("resolved", st.status)
    assert.is_nil(st.unavailable)
    out = ok_cmd(db, "cancel " .. id2)
    assert.truthy(out:find("recorded", 1, true), out)
    assert.is_true(json_of(db, "status " .. id2).cancel_requested)
    stop(w2)
    assert.are.equal(1, #json_of(db, "runs --attention"))
  end)

  it("flags once a run of an older mend that names no version, when its workflow's steps changed since", function()
    local NAP = 3600   -- asleep in b until the first worker is stopped; the last one is virtual
    write(wf .. "/o.lua", workflow("o", { { "a", "v1-a" }, { "b" } }, NAP))
    local id = ok_cmd(db, "start o --workflows " .. q(wf)):match("%S+")
    local w = worker(db, wf, log)
    until_true("b sleeping", function() return step_status(db, id, "b") == "sleeping" end)
    stop(w)
    -- as a database of a mend before versions leaves it: the run names no version
    H.sql(db, "UPDATE runs SET version = NULL, workflow_version = NULL, step_names = NULL")
    write(wf .. "/o.lua", workflow("o", { { "a", "v2-a" }, { "b" }, { "c", "v2-c" } }, NAP))
    w = worker(db, wf, log)
    until_true("flagged", function() return #json_of(db, "runs --attention") == 1 end)
    os.execute("sleep 0.5")   -- ten polls
    stop(w)
    local st = json_of(db, "status " .. id)
    assert.are.equal("running", st.status)
    assert.truthy(st.unavailable:find('workflow "o" now has 3 steps, the run has 2', 1, true), st.unavailable)
    local loud = 0
    for line in H.slurp(log):gmatch("[^\n]+") do
      local e = json.decode(line)
      if e.run == id and e.event == "recover" and (e.level == "warn" or e.level == "error") then
        loud = loud + 1
      end
    end
    assert.are.equal(1, loud)
    -- its steps back as they were: a worker carries it on
    write(wf .. "/o.lua", workflow("o", { { "a", "v1-a" }, { "b" } }, NAP))
    w = worker(db, wf, log, "--clock virtual")
    ok_cmd(db, "wait " .. id .. " --timeout 20")
    stop(w)
    assert.are.equal("succeeded", json_of(db, "status " .. id).status)
  end)
end)
