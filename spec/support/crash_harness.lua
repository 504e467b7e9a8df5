-- The crash harness's shared parts, for SQLite (spec/crash_spec.lua) and PostgreSQL
-- (spec/pg_crash_spec.lua): real `mend worker` processes started in the background, killed
-- with SIGKILL or stopped with SIGTERM; the saga of spec/support/crash/ submitted to them; a
-- last worker that settles what is left; and the audit of every invariant the crash tests
-- promise, read from the store and from the effect service's files. It must never assume a
-- backend: what only one has (PRAGMA integrity_check, the postmaster) stays in its spec.
local H = require "spec.helper"
local effects = require "spec.support.effects"
local assert = require "luassert"   -- busted's, which a spec sees as a global and a module does not

local M = {}

M.MEND = os.getenv("MEND_BIN") or "./build/mend"

function M.sh(cmd) return os.execute(cmd) end

function M.sleep(s) M.sh(string.format("sleep %.3f", s)) end

-- A killed worker whose parent shell is gone may linger as a zombie until something reaps
-- it, and kill -0 still finds zombies: H.alive reads the state instead.
M.alive = H.alive

-- Starts a worker in the background; returns its pid. `env` is put before the command
-- (VAR=value words), `flags` after it.
function M.start_worker(db, env, log, flags)
  local cmd = string.format(
    "%s sh -c 'exec %s worker --db %s --workflows spec/support/crash --lease 0.5 --poll 0.01 %s >>%s 2>&1' & echo $!",
    env or "", M.MEND, H.quote(db):gsub("'", "'\\''"), flags or "", log)
  local p = assert(io.popen(cmd))
  local pid = assert(tonumber(p:read("l")))
  p:close()
  return pid
end

function M.kill9(pid)
  M.sh("kill -9 " .. pid .. " 2>/dev/null")
  for _ = 1, 200 do
    if not M.alive(pid) then return end
    M.sleep(0.005)
  end
end

function M.stop(pid)
  M.sh("kill -TERM " .. pid .. " 2>/dev/null")
  for _ = 1, 1000 do
    if not M.alive(pid) then return end
    M.sleep(0.01)
  end
  M.kill9(pid)
end

-- One run of the saga. Every third fails its "charge" once (a retry), every fourth is
-- declined at "ship" (a compensation); `steady` leaves the retries out.
function M.submit(eng, dir, n, fast, steady)
  local input = { dir = dir, n = n, flaky = not steady and n % 3 == 0, fail = n % 4 == 0,
                  fast = fast }
  return eng:start("crash_saga", input, { detached = true })
end

-- The effect service's directory, a worker log, a client engine with the saga loaded on `db`
-- (default: a fresh SQLite file), and n runs submitted (none when n is 0).
function M.new_setup(n, fast, db)
  db = db or H.tmp_db()
  local dir = H.tmp_dir()
  local client = H.new_engine({ db = db, clock = "real" })
  client:load("spec/support/crash/saga.lua")
  local ids = {}
  for i = 1, n do ids[#ids + 1] = M.submit(client, dir, i, fast) end
  return db, dir, dir .. "/worker.log", client, ids
end

function M.finished(st)
  return st == "succeeded" or st == "compensated" or st == "failed" or st == "needs_attention"
end

-- Waits until every run is finished, with one live worker; returns the number unfinished.
-- pump (if given) is called while it waits: what the outside world does meanwhile.
function M.settle(db, client, ids, log, env, pump)
  local pid = M.start_worker(db, env, log)
  local left
  for _ = 1, 3000 do
    if pump then pump() end
    left = 0
    for _, id in ipairs(ids) do
      if not M.finished(client:status(id).status) then left = left + 1 end
    end
    if left == 0 then break end
    M.sleep(0.01)
  end
  M.stop(pid)
  return left
end

-- Every invariant the crash tests promise, checked from the store and the service's files.
-- The order of effects is the service's own (the order their requests reached it), never a
-- worker's clock. opts.skewed: the workers' clocks disagree, so a run's history times, which
-- are its writers' clocks, are held to go forward only between writes of one worker.
function M.audit(db, client, ids, dir, opts)
  opts = opts or {}
  local applied, undone = {}, {}
  for _, e in ipairs(effects.read(dir)) do
    local t = e.kind == "apply" and applied or undone
    assert.is_nil(t[e.key], "effect applied twice for key " .. e.key)
    t[e.key] = e
  end
  local request_keys = {}
  for _, r in ipairs(effects.requests(dir)) do
    local k = r.run .. "/" .. r.step
    request_keys[k] = request_keys[k] or r.key
    -- the key a step sends is the same on every attempt and after every restart
    assert.are.equal(request_keys[k], r.key, "idempotency key changed for " .. k)
  end
  -- the group's branches share a rank: between them the order is the history's (below)
  local rank = { reserve = 1, ["prepare/charge"] = 2, ["prepare/pack"] = 2, ["items/1"] = 3,
                 ["items/2"] = 3, ["items/3"] = 3, ship = 4 }
  local counts = {}
  for _, id in ipairs(ids) do
    local st = client:status(id)   -- nothing acknowledged is lost: every id is there
    assert.is_truthy(M.finished(st.status), "run " .. id .. " ended " .. st.status)
    counts[st.status] = (counts[st.status] or 0) + 1
    -- A run the crash-loop guard set aside (its worker stopped each time its step ran: here,
    -- the kills of this test) waits for a person, who is told its step's attempts may have had
    -- their effect: for that failed step, whether the effect was applied is not known. Every
    -- other step of it is held to the rule.
    local looped = st.status == "needs_attention" and st.reason == "crash_loop"
    if looped then counts.crash_loop = (counts.crash_loop or 0) + 1 end
    local undo_order = {}
    for _, s in ipairs(st.steps) do
      if s.name == "prepare" or s.name == "items" then goto group end   -- no effect of their own
      local did_succeed = s.status == "succeeded" or s.status == "compensated"
      -- an effect is applied exactly once for every step that succeeded, and never otherwise
      if not (looped and s.status == "failed") then
        assert.are.equal(did_succeed, applied[s.idempotency_key] ~= nil,
          id .. " " .. s.name .. " is " .. s.status .. " but its effect applied: " .. tostring(applied[s.idempotency_key] ~= nil))
      end
      local u = undone[s.idempotency_key]
      if u then
        -- compensated only steps that had succeeded, after their effect
        assert.is_truthy(applied[s.idempotency_key], "undo without apply for " .. s.idempotency_key)
        assert.is_truthy(u.seq > applied[s.idempotency_key].seq, "undo before apply for " .. s.idempotency_key)
        undo_order[#undo_order + 1] = u
      end
      assert.are.equal(s.status == "compensated", u ~= nil, id .. " " .. s.name .. " undo vs status")
      ::group::
    end
    -- compensation runs in reverse order
    table.sort(undo_order, function(a, b) return a.seq < b.seq end)
    for i = 2, #undo_order do
      assert.is_truthy(rank[undo_order[i - 1].step] >= rank[undo_order[i].step], "compensation order in " .. id)
    end
    -- two branches (or items) undone: the one that succeeded later first
    local succeeded_at, compensating_at = {}, {}
    for k, h in ipairs(client:history(id)) do
      if h.event == "step" and h.to == "succeeded" then succeeded_at[h.step] = k end
      if h.event == "step" and h.to == "compensating" then compensating_at[h.step] = compensating_at[h.step] or k end
    end
    for _, pair in ipairs { { "prepare/charge", "prepare/pack" }, { "items/1", "items/2" },
                            { "items/1", "items/3" }, { "items/2", "items/3" } } do
      local a, b = pair[1], pair[2]
      if compensating_at[a] and compensating_at[b] then
        assert.are.equal(succeeded_at[a] > succeeded_at[b], compensating_at[a] < compensating_at[b],
          a .. " and " .. b .. " compensated out of their completion order in " .. id)
      end
    end
    -- the history: times never go back, a succeeded step never runs again, and a run changes
    -- hands between workers only through a recovery
    local last_at, done, holder = {}, {}, nil
    local history = client:history(id)
    -- the whole history, for the message of a failed check: which worker wrote what, when
    local function story()
      local lines = {}
      for _, h in ipairs(history) do
        lines[#lines + 1] = ("%s %.6f %s %s %s %s"):format(tostring(h.seq), h.at, tostring(h.worker),
          h.event, tostring(h.step or ""), tostring(h.to or ""))
      end
      return "\n" .. table.concat(lines, "\n")
    end
    for _, h in ipairs(history) do
      local clock = opts.skewed and tostring(h.worker) or ""
      assert.is_truthy(h.at >= (last_at[clock] or -math.huge) - 1e-6, "history time went back in " .. id .. story())
      last_at[clock] = h.at
      if h.event == "step" and h.to == "succeeded" then done[h.step] = true end
      if h.event == "step" and h.to == "running" then
        assert.is_falsy(done[h.step], "succeeded step " .. tostring(h.step) .. " ran again in " .. id)
      end
      if h.event == "claimed" or h.event == "recovered" then holder = h.worker
      elseif holder then
        assert.are.equal(holder, h.worker, "a second worker wrote to " .. id .. " without taking it over" .. story())
      end
    end
  end
  return counts
end

-- ---------------------------------------------------------------- tokens and child runs

-- The runs of crash_handoff (spec/support/crash/handoff.lua) and the world they wait for: the
-- harness reads the tokens they hand out from tokens.log and completes each attempt's, some
-- twice and some with a token of an earlier attempt (both must be refused); the first token of
-- every fifth run is failed as retryable instead (a new attempt, with a new token). What was
-- accepted is kept for the audit.
local Handoff = {}
Handoff.__index = Handoff

function M.handoff(client, dir, db)
  return setmetatable({ client = client, dir = dir, db = db, ids = {}, n = {}, tokens = {},
                        sent = {}, tried = {}, accepted = {}, refused = 0, unsure = 0,
                        offset = 0 }, Handoff)
end

function Handoff:start(k)
  local id = self.client:start("crash_handoff", { dir = self.dir, n = k, fail = k % 3 == 0 },
                               { detached = true })
  self.ids[#self.ids + 1] = id
  self.n[id], self.tokens[id], self.sent[id], self.tried[id], self.accepted[id] = k, {}, {}, {}, {}
  return id
end

local REFUSED = { "was used already", "of an earlier attempt is refused", "its token is refused",
                  "its tokens are of no use" }

-- Sends one answer; true when accepted, false when refused as a used or stale token, nil
-- when the client could not say (its store went away under it: the answer may be committed).
function Handoff:answer(id, attempt, token, again)
  self.tried[id][attempt] = true
  local ok, err
  if self.n[id] % 5 == 0 and attempt == 1 then
    ok, err = pcall(self.client.fail, self.client, token, { kind = "retryable", message = "again" })
  else
    ok, err = pcall(self.client.complete, self.client, token, { n = self.n[id], attempt = attempt })
  end
  if ok then
    assert.is_falsy(again, "a token of " .. id .. " attempt " .. attempt .. " accepted twice")
    return true
  end
  for _, why in ipairs(REFUSED) do
    if tostring(err):find(why, 1, true) then self.refused = self.refused + 1 return false end
  end
  self.unsure = self.unsure + 1
  return nil
end

-- Reads the tokens handed out since the last call and answers the newest of each run.
function Handoff:pump()
  local f = io.open(self.dir .. "/tokens.log")
  if not f then return end
  f:seek("set", self.offset)
  for line in f:lines() do
    local id, attempt, token = line:match("^(%S+) (%d+) (%S+)$")
    if not token then break end   -- a line half written: read it whole next time
    self.offset = self.offset + #line + 1
    local list = self.tokens[id][tonumber(attempt)] or {}
    list[#list + 1] = token
    self.tokens[id][tonumber(attempt)] = list
  end
  f:close()
  for id, by in pairs(self.tokens) do
    local newest = 0
    for a in pairs(by) do newest = math.max(newest, a) end
    local list = by[newest]
    if list and not self.sent[id][newest] then
      local got = self:answer(id, newest, list[#list])
      if got ~= nil then self.sent[id][newest] = true end
      if got then self.accepted[id][newest] = true end
      if got and math.random() < 0.3 then self:answer(id, newest, list[#list], true) end
      if newest > 1 and math.random() < 0.3 then   -- an old one, found in some outbox
        local old = by[math.random(1, newest - 1)]
        if old then self:answer(id, newest - 1, old[1], true) end
      end
    end
  end
end

-- A child's history: once it ended, no step of it runs; reopened to be compensated with its
-- parent, its steps only go back. True when it succeeded at some point.
local function audit_child_history(client, kid)
  local ended, reopened, succeeded = false, false, false
  for _, h in ipairs(client:history(kid)) do
    if h.event == "run" and M.finished(h.to) then ended = true end
    if h.event == "run" and h.to == "succeeded" then succeeded = true end
    if h.event == "run" and h.to == "compensating" and h.from == "succeeded" then
      ended, reopened = false, true
    end
    if h.event == "step" then
      assert.is_false(ended, "step " .. tostring(h.step) .. " of child " .. kid .. " moved after it ended")
      assert.is_false(reopened and h.to == "running",
        "step " .. tostring(h.step) .. " of child " .. kid .. " ran after it was reopened")
    end
  end
  return succeeded
end

-- Every step with an effect: applied once if it succeeded, undone once if it was compensated.
local function audit_effects(id, st, applied, undone, skip)
  for _, s in ipairs(st.steps) do
    if not skip[s.name] and not (st.reason == "crash_loop" and s.status == "failed") then
      local did = s.status == "succeeded" or s.status == "compensated"
      assert.are.equal(did, applied[s.idempotency_key] ~= nil, id .. " " .. s.name .. " is " .. s.status)
      assert.are.equal(s.status == "compensated", undone[s.idempotency_key] ~= nil,
        id .. " " .. s.name .. " undo vs status " .. s.status)
    end
  end
end

-- The audit of the runs of crash_handoff and their children; returns counts by outcome.
function Handoff:audit()
  local applied, undone = {}, {}
  for _, e in ipairs(effects.read(self.dir)) do
    local t = e.kind == "apply" and applied or undone
    assert.is_nil(t[e.key], "effect applied twice for key " .. e.key)
    t[e.key] = e
  end
  local counts = { children = 0, asked_again = 0, too_late = 0 }
  for _, id in ipairs(self.ids) do
    local st = self.client:status(id)
    assert.is_truthy(M.finished(st.status), "run " .. id .. " ended " .. st.status)
    counts[st.status] = (counts[st.status] or 0) + 1
    audit_effects(id, st, applied, undone, { ask = true, ship = true })
    -- the token: one outcome taken an attempt, the one the harness had accepted for it
    local ask = H.step(st, "ask")
    local taken = {}
    for _, h in ipairs(self.client:history(id)) do
      if h.event == "token" and h.step == "ask" and (h.detail == "completed" or h.detail == "failed") then
        assert.is_nil(taken[h.attempt], id .. ": two outcomes taken by attempt " .. tostring(h.attempt))
        taken[h.attempt] = h.detail
        assert.is_truthy(self.tried[id][h.attempt], id .. ": an outcome the harness never sent, attempt " .. h.attempt)
      end
      if h.event == "token" and tostring(h.error):find("came too late", 1, true) then
        counts.too_late = counts.too_late + 1
      end
    end
    if ask.attempts > 1 then counts.asked_again = counts.asked_again + 1 end
    if ask.status == "succeeded" or ask.status == "compensated" then
      assert.are.same({ n = self.n[id], attempt = ask.attempts }, ask.result, id)
      assert.are.equal("completed", taken[ask.attempts], id)
    end
    for a in pairs(self.accepted[id]) do
      -- accepted for the attempt that ended waiting for it: taken (an attempt that a crash
      -- ended before its execute returned makes way for the next, and its answer comes too late)
      if a == ask.attempts and st.reason ~= "crash_loop" then
        assert.is_truthy(taken[a], id .. ": the answer accepted for attempt " .. a .. " was lost")
      end
    end
    -- the child: started once for the step, ended, compensated with its parent
    local kids = H.sql(self.db, ("SELECT id FROM runs WHERE parent_run = '%s'"):format(id))
    local ship = H.step(st, "ship")
    assert.is_truthy(#kids <= 1, id .. " started " .. #kids .. " children")
    if ship.status ~= "pending" and st.reason ~= "crash_loop" then
      assert.are.equal(1, #kids, id .. " ship is " .. ship.status .. " with no child")
    end
    if #kids == 1 then
      counts.children = counts.children + 1
      local kid = kids[1]
      local kst = self.client:status(kid)
      assert.is_truthy(M.finished(kst.status), "child " .. kid .. " ended " .. kst.status)
      assert.are.equal(id .. "/ship", kst.key)
      if ship.status == "compensated" then
        assert.are.equal("compensated", kst.status, "child " .. kid .. " of compensated " .. id)
      end
      if ship.status == "succeeded" then assert.are.equal("succeeded", kst.status, kid) end
      audit_effects(kid, kst, applied, undone, {})
      local succeeded = audit_child_history(self.client, kid)
      if st.status == "compensated" and succeeded then
        assert.are.equal("compensated", kst.status, "child " .. kid .. " succeeded, its parent "
          .. id .. " compensated")
      end
    end
  end
  return counts
end

return M
