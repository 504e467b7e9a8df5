-- Workers on one PostgreSQL database killed with SIGKILL while their steps' HTTP requests are
-- in flight, as README ("At-least-once execute", "Exactly-once effect with an idempotent
-- service") and docs/lua-api.md (mend.http's Idempotency-Key) promise a user: three `mend
-- worker` processes, runs whose steps POST to a real HTTP server on loopback
-- (tests/http_server.py, which records every request with its Idempotency-Key), and a worker
-- killed each time the server holds one of its requests. What is asserted: every run ends as
-- its input says (succeeded, compensated, or in the dead-letter queue), none is lost; every
-- request of a step (and of its compensation) carries one key on every attempt, whichever
-- worker sends it, the store's key for that step; a step killed in flight is sent again by
-- another worker with that key; within a run, no step is sent after a later one nor after
-- the compensation began, and nothing is sent once every run has ended. Wall-clock bounds
-- are generous; what is asserted does not depend on timing.
local H = require "spec.helper"
local mend = require "mend"
local server = require("spec.support.http_server").new()

local q, json = H.quote, mend.json
local it_pg = H.PG and it or pending
-- kill cycles (MEND_HTTP_KILL_CYCLES for a longer soak)
local CYCLES = tonumber(os.getenv("MEND_HTTP_KILL_CYCLES") or "10")

local WORKFLOW = [[
local mend = require "mend"
-- the worker's pid, so that the server's log says which worker sent each request
local f = io.open("/proc/self/stat")
local PID = f and tonumber(f:read("a"):match("^(%d+)"))
if f then f:close() end
local function call(ctx, path, phase)
  mend.http{ method = "POST", url = ctx.input.base .. path, timeout = 10,
             json = { run = ctx.run_id, step = ctx.step, attempt = ctx.attempt, phase = phase, pid = PID } }
end
return { name = "kill_http", retry = { max_attempts = 50, initial = 0.05, max_delay = 0.2, jitter = 0 },
  compensate_retry = { max_attempts = 50, initial = 0.05, max_delay = 0.2, jitter = 0 },
  steps = {
    { name = "reserve", execute = function(ctx) call(ctx, "/reserve", "do") return "r" end,
      compensate = function(ctx) call(ctx, ctx.input.release, "undo") end },
    { name = "charge", execute = function(ctx) call(ctx, ctx.input.charge, "do") return "c" end },
    { name = "ship", execute = function(ctx) call(ctx, "/ship", "do") return "s" end },
  } }
]]
local STEP_INDEX = { reserve = 1, charge = 2, ship = 3 }
local JSON = { ["Content-Type"] = "application/json" }
-- "/charge", "/decline", "/release" and "/broken" hold each request 3 s: the window in which
-- its worker is killed.
local SCRIPT = {
  ["/reserve"] = { { status = 200, body = "{}", headers = JSON, delay = 0.05 } },
  ["/charge"] = { { status = 200, body = "{}", headers = JSON, delay = 3 } },
  ["/decline"] = { { status = 402, body = "card declined", delay = 3 } },
  ["/ship"] = { { status = 503, body = "down" }, { status = 503, body = "down" },
                { status = 200, body = "{}", headers = JSON, delay = 0.05 } },
  ["/release"] = { { status = 200, body = "{}", headers = JSON, delay = 3 } },
  ["/broken"] = { { status = 400, body = "no such reservation", delay = 3 } },
}
-- A run's input by n: succeeds, is compensated (a declined card), or goes to the dead-letter
-- queue (declined, and its release refused).
local KINDS = {
  [0] = { charge = "/charge", release = "/release", ends = "succeeded" },
  [1] = { charge = "/decline", release = "/release", ends = "compensated" },
  [2] = { charge = "/decline", release = "/broken", ends = "needs_attention" },
}

describe("workers on PostgreSQL killed in the middle of HTTP steps", function()
  setup(server.start)
  teardown(server.stop)
  local workers = {}
  after_each(function() H.kill_and_cleanup(workers) end)

  it_pg("end every run, send each step with one key on every attempt, and never after the run ended", function()
    server.script(SCRIPT)
    local dir = H.tmp_dir()
    local wf = H.write_file(dir, "kill_http.lua", WORKFLOW)
    local db, log = H.new_db(), dir .. "/workers.log"
    local function start_worker()
      local p = assert(io.popen(("sh -c 'exec %s worker --db %s --workflows %s --lease 1 --poll 0.02 >>%s 2>&1' & echo $!")
        :format(H.MEND, q(db):gsub("'", "'\\''"), q(dir):gsub("'", "'\\''"), log)))
      local pid = assert(tonumber(p:read("l")))
      p:close()
      workers[#workers + 1] = pid
      return pid
    end
    local client = H.new_engine({ db = db, clock = "real" })
    client:load(wf)
    local ids, kind_of = {}, {}
    local function submit(k)
      for _ = 1, k do
        local n = #ids + 1
        local kind = KINDS[n % 3]
        ids[n] = client:start("kill_http", { base = server.base, charge = kind.charge, release = kind.release },
                              { detached = true })
        kind_of[ids[n]] = kind
      end
    end
    local live = {}
    for i = 1, 3 do live[i] = start_worker() end

    -- CYCLES times: runs submitted, then the worker whose request the server holds is killed
    -- while it waits for the answer (a step's, or a compensation's every other time), and a
    -- new one takes its place.
    local killed, seen_lines = {}, 0
    for c = 1, CYCLES do
      local phase = c % 2 == 1 and "do" or "undo"
      submit(6)
      local victim
      H.wait_for("a request held by the server (" .. phase .. ")", function()
        local seen = server.seen()
        for i = seen_lines + 1, #seen do
          local r = seen[i]
          local b = json.decode(r.body)
          if b.phase == phase and r.path ~= "/reserve" and r.path ~= "/ship" then
            for w, pid in ipairs(live) do
              if pid == b.pid and H.alive(pid) then
                victim = { slot = w, req = r, body = b, line = i }
              end
            end
          end
        end
        seen_lines = #seen
        return victim ~= nil
      end, 30)
      os.execute("kill -9 " .. live[victim.slot])
      H.wait_for("the worker killed", function() return not H.alive(live[victim.slot]) end, 10)
      killed[#killed + 1] = victim
      live[victim.slot] = start_worker()
    end

    -- Every run ends, with the workers left alive.
    local t0 = H.wall()
    H.wait_for("every run to end", function()
      for _, id in ipairs(ids) do
        local st = client:status(id).status
        if st == "running" or st == "compensating" then return false end
      end
      return true
    end, 45 + CYCLES)
    local settled = H.wall() - t0
    local requests = server.seen()
    -- Nothing more is sent once every run has ended (the workers still poll).
    os.execute("sleep 1.5")
    local after = server.seen()
    assert.are.equal(#requests, #after, "requests after every run ended: " .. json.encode(after[#requests + 1] or {}))

    -- No run lost, each ended as its input says; the store's key of each step.
    local keys = {}
    assert.are.equal(#ids, tonumber(H.sql(db, "SELECT count(*) FROM runs")[1]))
    for _, id in ipairs(ids) do
      local st = client:status(id)
      assert.are.equal(kind_of[id].ends, st.status, id)
      for _, s in ipairs(st.steps) do keys[id .. "/" .. s.name] = s.idempotency_key end
    end

    -- One key per step (the store's) and per compensation (its own, "/compensate"), on every
    -- attempt from every worker; each key names one step of one run.
    local key_of, owner_of, order = {}, {}, {}
    for i, r in ipairs(requests) do
      local b = json.decode(r.body)
      local step = b.run .. "/" .. b.step .. "/" .. b.phase
      assert.is_not_nil(kind_of[b.run], "a request of a run never started: " .. r.body)
      local want = keys[b.run .. "/" .. b.step] .. (b.phase == "undo" and "/compensate" or "")
      assert.are.equal(want, r.idempotency_key, "request " .. i .. ": " .. r.body)
      key_of[step] = key_of[step] or r.idempotency_key
      assert.are.equal(key_of[step], r.idempotency_key)
      assert.is_true(owner_of[r.idempotency_key] == nil or owner_of[r.idempotency_key] == step)
      owner_of[r.idempotency_key] = step
      -- Within a run: steps in order, nothing executed once its compensation began.
      local o = order[b.run] or { step = 0, undone = false }
      order[b.run] = o
      if b.phase == "do" then
        assert.is_false(o.undone, "a step sent after its run began compensating: " .. r.body)
        assert.is_true(STEP_INDEX[b.step] >= o.step, "a step sent after a later one: " .. r.body)
        o.step = STEP_INDEX[b.step]
      else
        o.undone = true
      end
    end

    -- Each step or compensation killed in flight was sent again, by another worker, with its key.
    for _, k in ipairs(killed) do
      local again
      for i = k.line + 1, #requests do
        local r = requests[i]
        local b = json.decode(r.body)
        if b.run == k.body.run and b.step == k.body.step and b.phase == k.body.phase and b.pid ~= k.body.pid then
          again = again or r
          assert.are.equal(k.req.idempotency_key, r.idempotency_key)
          assert.is_true(b.attempt > k.body.attempt, "attempt " .. b.attempt .. " after " .. k.req.body)
        end
      end
      assert.is_not_nil(again, "the step killed in flight was not sent again: " .. k.req.body)
    end
    print(string.format("\n  %d runs, %d requests, %d workers killed in flight; settled in %.1f s",
                        #ids, #requests, #killed, settled))
  end)
end)
