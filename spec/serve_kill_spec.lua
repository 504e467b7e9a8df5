-- The process that takes starts over HTTP killed with SIGKILL while clients start runs and send
-- events through the API, restarted on the same address each time, on SQLite and on
-- PostgreSQL: in turn a `mend worker --listen` killed at a random moment and a `mend serve`
-- killed right after one of its commits of the clients' writes, before it answers them
-- (MEND_FAILPOINT after_commit), a plain worker beside them. What docs/http-api.md ("POST /api/v1/runs", "POST
-- .../events": answered once committed, the same key gives the same run or one event) and
-- README ("Workers": a worker restarted on the same host takes over the dead one's runs at
-- once) promise a user. The clients (spec/support/kill_clients.py) start runs with a run key
-- or without and send each of their runs that waits two `tick` events, with an event key or
-- without, and do what the document lets a client do when it gets no answer: send a keyed
-- request again, look before sending again an unkeyed event, leave an unkeyed start alone.
-- What is asserted:
-- - every request is answered 2xx or not at all (the connection refused, or closed by the
--   kill), never an error and never after the client's 10 s;
-- - every start answered 2xx has its run, with the answered id; a key gives one run however
--   often it was sent; a start without a key and without an answer gave at most one run; no
--   run comes from nowhere;
-- - each run ends as its input says (succeeded, or compensated), and reads whole through
--   `mend status` and `mend history` (its history's seq 1, 2, ... with no gap, ending where
--   the run ended);
-- - every event a client sent is in its run's inbox once, however often it was sent, and is
--   taken by the wait it was sent for, in the order sent;
-- - while the server is down a client's connection is refused (at once, not left waiting);
--   as soon as the restarted server says it serves, it answers: a run answered before the
--   kill reads, a new start is answered 201;
-- - a serve killed after its commit left writes committed and unanswered, which the clients
--   found (the test met the window it is about).
-- Kill cycles: MEND_SERVE_KILL_CYCLES (default 3), for a longer soak by hand; the kills'
-- moments are random (MEND_SERVE_KILL_SEED, printed, repeats the choices, not the timing).
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local mend = require "mend"

local q, json = H.quote, mend.json
local CYCLES = tonumber(os.getenv("MEND_SERVE_KILL_CYCLES") or "3")
local CLIENTS = 4
-- runs read through `mend status` and `mend history` (MEND_SERVE_KILL_CLI_READS): fewer on
-- PostgreSQL, where a command's connection costs most of a second on a loaded machine
local CLI_READS = tonumber(os.getenv("MEND_SERVE_KILL_CLI_READS") or (H.PG and "3" or "12"))

local WORKFLOW = [[
local mend = require "mend"
local function waits(ctx) return ctx.input.events end
return { name = "kill_serve", retry = { max_attempts = 5, initial = 0.02, jitter = 0 },
  steps = {
    { name = "prep", execute = function(ctx) mend.sleep(0.05) return ctx.input.uid end,
      compensate = function() end },
    { name = "first", when = waits, wait_for = "tick", timeout = 3600 },
    { name = "second", when = waits, wait_for = "tick", timeout = 3600 },
    { name = "check", execute = function(ctx)
        if ctx.input.decline then error(mend.fatal("declined")) end
        return "ok"
      end },
  } }
]]

-- curl's exit code and HTTP status for one GET (7: the connection was refused).
local function probe(base, path)
  local rc, out = H.shell(("curl -s -m 5 -o /dev/null -w '%%{http_code}' %s"):format(q(base .. path)))
  return rc, tonumber(out)
end

-- The clients' log so far, one table a line (a line being written is left for later), its
-- nulls nil.
local function lines(path)
  local out = {}
  for line in H.read(path):gmatch("([^\n]*)\n") do
    local r = json.decode(line)
    for k, v in pairs(r) do if v == json.null then r[k] = nil end end
    out[#out + 1] = r
  end
  return out
end

describe("a serving worker killed while HTTP clients start runs and send events", function()
  local pids = {}
  after_each(function() H.kill_and_cleanup(pids) end)

  it("answers what it committed, loses nothing it answered, and is refused while down", function()
    local seed = tonumber(os.getenv("MEND_SERVE_KILL_SEED") or "") or os.time()
    math.randomseed(seed)
    local dir = H.tmp_dir()
    H.write_file(dir, "kill_serve.lua", WORKFLOW)
    local db = H.new_db(dir, "kill.db")
    local serial = 0
    -- A server on 127.0.0.1:port, `mend worker --listen` or `mend serve` (kind "worker" or
    -- "serve"), killing itself at its commit `commit_kill` if given (MEND_FAILPOINT, in a
    -- build with failpoints); its pid and base URL (nil when the port could not be had), and
    -- its stderr.
    local function serve(port, kind, commit_kill)
      serial = serial + 1
      local out, err = ("%s/serve%d.out"):format(dir, serial), ("%s/serve%d.err"):format(dir, serial)
      local env = commit_kill and ("MEND_FAILPOINT=after_commit:%d "):format(commit_kill) or ""
      local p = assert(io.popen(("%s%s %s --db %s --workflows %s --listen 127.0.0.1:%d >%s 2>%s & echo $!")
        :format(env, H.MEND, kind == "worker" and "worker --poll 0.05" or "serve", q(db), q(dir), port,
                q(out), q(err))))
      local pid = assert(tonumber(p:read("l")))
      p:close()
      pids[#pids + 1] = pid
      local base
      H.wait_for("the worker to listen", function()
        base = H.read(out):match("serving (http://[%d%.]+:%d+)/api/v1")
        return base ~= nil or not H.alive(pid)
      end, 15)
      return pid, base, err
    end
    -- A port below the ephemeral range, so that no client's own end of a connection takes it
    -- while the server is down.
    local pid, base
    for _ = 1, 20 do
      pid, base = serve(20000 + math.random(0, 9999), "worker")
      if base then break end
    end
    assert(base, "no port for the worker")
    local port = tonumber(base:match(":(%d+)$"))
    -- The servers in turn: `mend worker --listen` first, then `mend serve`, and so on; beside
    -- them a worker that serves no HTTP and is never killed executes runs too (`mend serve`
    -- executes none). A `mend worker --listen` is killed at a random moment; a `mend serve`
    -- (but the last) kills itself right after one of its commits of the clients' starts and
    -- events, before it answers them: a kill's worst moment for a client, which a kill from
    -- outside rarely meets (killed from outside after 5 s if it has not, as in a build without
    -- failpoints).
    local kinds = {}
    for c = 1, CYCLES + 1 do kinds[c] = c % 2 == 1 and "worker" or "serve" end
    pids[#pids + 1] = H.start_worker(db, dir, dir .. "/worker.log", "--poll 0.05")

    local clog, stop = dir .. "/clients.log", dir .. "/stop"
    local p = assert(io.popen(("python3 spec/support/kill_clients.py %s %s %s %d %d >%s 2>&1 & echo $!")
      :format(q(base), q(clog), q(stop), CLIENTS, seed, q(dir .. "/clients.err"))))
    local clients = assert(tonumber(p:read("l")))
    p:close()
    pids[#pids + 1] = clients
    H.wait_for("the clients' first answer", function() return lines(clog)[1] ~= nil end, 20)

    local probes, down_for, up_in = {}, {}, {}
    local self_killed = 0
    for c = 1, CYCLES do
      if kinds[c] == "serve" then
        local deadline = H.wall() + 5
        while H.alive(pid) and H.wall() < deadline do os.execute("sleep 0.02") end
        if not H.alive(pid) then self_killed = self_killed + 1 end
      else
        os.execute(("sleep %.2f"):format(0.4 + math.random() * 0.6))
      end
      os.execute("kill -9 " .. pid .. " 2>/dev/null")
      local t_kill = H.wall()
      H.wait_for("the server killed", function() return not H.alive(pid) end, 10)
      -- the last start answered before the kill
      local before
      for _, r in ipairs(lines(clog)) do
        if r.op == "start" and r.status == 201 then before = r.body.id end
      end
      -- Down: refused at once.
      local rc = probe(base, "/api/v1")
      assert.are.equal(7, rc, "curl's exit code while the server is down")
      os.execute(("sleep %.2f"):format(0.1 + math.random() * 0.3))
      down_for[c] = H.wall() - t_kill
      local t_up = H.wall()
      local commit_kill = c < CYCLES and kinds[c + 1] == "serve" and math.random(3, 8) or nil
      local new_pid, new_base, err = serve(port, kinds[c + 1], commit_kill)
      assert(new_base, "the worker did not restart on " .. base .. ": " .. H.read(err))
      pid = new_pid
      up_in[c] = H.wall() - t_up
      -- Up: answered at once, what was answered before included (asked of a server that does
      -- not kill itself meanwhile).
      assert.is_not_nil(before, "no start answered before kill " .. c)
      if not commit_kill then
        local code, run = S.get(base, "/api/v1/runs/" .. before)
        assert.are.equal(200, code, "a run answered before the kill, read after the restart")
        assert.are.equal(before, run.id)
        local uid = "probe-" .. c
        local body = { workflow = "kill_serve", key = "k-" .. uid, input = { uid = uid, decline = false, events = false } }
        code, run = S.post(base, "/api/v1/runs", body)
        assert.are.equal(201, code, "a start right after the restart")
        probes[uid] = run.id
      end
    end

    -- The clients finish: their runs' ticks, then exit.
    H.write_file(dir, "stop", "")
    H.wait_for("the clients to finish", function() return not H.alive(clients) end, 60)
    assert.are.equal("", H.read(dir .. "/clients.err"))
    local log = lines(clog)

    local eng = H.new_engine({ db = db, clock = "real" })
    local t_settle = H.wall()
    H.wait_for("every run to end", function()
      return #eng:runs{ status = "running" } == 0 and #eng:runs{ status = "compensating" } == 0
    end, 30)
    local settled, t_check = H.wall() - t_settle, H.wall()

    -- Every request answered 2xx, or not at all; what no answer looked like.
    local failures, refused, answered = {}, 0, 0
    for _, r in ipairs(log) do
      if r.status then
        answered = answered + 1
        assert(r.status >= 200 and r.status < 300, "answered " .. json.encode(r))
      else
        failures[r.err] = (failures[r.err] or 0) + 1
        assert.are_not.equal("timeout", r.err, "a request left unanswered for 10 s: " .. json.encode(r))
        if r.err == "refused" then refused = refused + 1 end
      end
    end
    assert.is_true(refused > 0, "no client met the server down")

    -- The runs in the store, by the uid of their input.
    local runs_of, runs = {}, {}
    for _, row in ipairs(H.sql(db, "SELECT id, input FROM runs")) do
      local id, input = row:match("^([^|]*)|(.*)$")
      local uid = json.decode(input).uid
      runs_of[uid] = runs_of[uid] or {}
      table.insert(runs_of[uid], id)
      runs[id] = uid
    end

    -- Starts: each uid's answers, and its runs.
    local starts = {}
    for _, r in ipairs(log) do
      if r.op == "start" then
        local s = starts[r.uid] or { key = r.key, answers = {} }
        starts[r.uid] = s
        if r.status then s.answers[#s.answers + 1] = r end
      end
    end
    -- n_existed: keyed starts committed whose answer the kill took (sent again: 200, existed)
    local n_keyed, n_lost, lost_made, n_existed = 0, 0, 0, 0
    for uid, s in pairs(starts) do
      local made = runs_of[uid] or {}
      local created = 0
      for _, a in ipairs(s.answers) do
        assert.are.equal(made[1], a.body.id, "the answered id of " .. uid)
        assert.are.equal(a.status == 200, a.body.existed, json.encode(a))
        if a.status == 201 then created = created + 1 else n_existed = n_existed + 1 end
      end
      assert.is_true(created <= 1, uid)
      if s.key then
        n_keyed = n_keyed + 1
        assert.is_true(#s.answers >= 1, "a keyed start never answered: " .. uid)
        assert.are.equal(1, #made, "runs of key " .. s.key)
      elseif #s.answers == 1 then
        assert.are.equal(1, #made, "runs of " .. uid)
      else
        n_lost = n_lost + 1
        assert.is_true(#made <= 1, "runs of an unanswered start " .. uid)
        lost_made = lost_made + #made
      end
    end
    for uid, id in pairs(probes) do assert.are.same({ id }, runs_of[uid]) end
    for id, uid in pairs(runs) do
      assert.is_true(starts[uid] ~= nil or probes[uid] ~= nil, "a run no client started: " .. id)
    end

    -- Events: every tick sent is in its run's inbox once, and taken by its wait.
    local sent = {}
    for _, r in ipairs(log) do
      if r.op == "event" then
        local e = sent[r.uid] or { run = r.run, answers = {} }
        sent[r.uid] = e
        if r.status then
          e.answers[#e.answers + 1] = r
          if r.status == 202 then assert.is_true(r.body.sent, json.encode(r))
          else
            assert.are.equal(200, r.status, json.encode(r))
            assert.is_true(r.body.duplicate, json.encode(r))
          end
        end
      end
    end
    local inbox = {}
    for _, row in ipairs(H.sql(db, "SELECT run_id, name, payload, consumed, step FROM inbox")) do
      local run, name, payload, consumed, step = row:match("^([^|]*)|([^|]*)|(.*)|([^|]*)|([^|]*)$")
      local uid = json.decode(payload).uid
      assert.is_nil(inbox[uid], "an event in the inbox twice: " .. uid)
      inbox[uid] = { run = run, name = name, consumed = consumed ~= "", step = step }
    end
    -- n_dup: keyed events committed whose answer the kill took (sent again: 200, duplicate);
    -- n_found: unkeyed ones the client found in the inbox, unanswered
    local n_events, n_dup, n_found = 0, 0, 0
    for uid, e in pairs(sent) do
      n_events = n_events + 1
      if #e.answers == 0 then n_found = n_found + 1
      elseif e.answers[#e.answers].status == 200 then n_dup = n_dup + 1 end
      local got = inbox[uid]
      assert.is_not_nil(got, "an event sent is not in the inbox: " .. uid)
      assert.are.equal(e.run, got.run)
      assert.are.equal("tick", got.name)
      assert.is_true(got.consumed, uid)
      assert.are.equal(uid:match("%-t1$") and "first" or "second", got.step, uid)
    end
    for uid in pairs(inbox) do assert.is_not_nil(sent[uid], "an event no client sent: " .. uid) end

    -- Each run ends as its input says, and reads whole: every run through the engine's reads,
    -- and through `mend status` and `mend history` those a kill caught unfinished (taken up
    -- again by a restarted worker: a `recovered` row after the `claimed` one of its first
    -- worker), a few of them chosen at random (a command costs a process).
    local recovered, caught = 0, {}
    local function whole(id, want, hist)
      for i, h in ipairs(hist) do assert.are.equal(i, h.seq, id) end
      local last = hist[#hist]
      assert.is_true(last.step == nil and last.to == want, id .. ": " .. json.encode(last))
    end
    for id in pairs(runs) do
      local st = eng:status(id)
      local want = st.input.decline and "compensated" or "succeeded"
      assert.are.equal(want, st.status, id)
      if st.input.events then
        assert.are.same({ uid = st.input.uid .. "-t1" }, H.step(st, "first").result)
        assert.are.same({ uid = st.input.uid .. "-t2" }, H.step(st, "second").result)
      end
      local hist = eng:history(id)
      whole(id, want, hist)
      local claimed, taken = 0, 0
      for _, h in ipairs(hist) do
        if h.event == "claimed" then claimed = claimed + 1 end
        if h.event == "recovered" then taken = taken + 1 end
      end
      assert.are.equal(1, claimed, id)   -- started by the server, held by no process before
      if taken > 0 then
        recovered = recovered + 1
        caught[#caught + 1] = { id = id, want = want }
      end
    end
    for _ = 1, math.min(CLI_READS, #caught) do
      local r = table.remove(caught, math.random(#caught))
      local rc, out = H.mend_cmd(db, "status " .. r.id .. " --json")
      assert.are.equal(0, rc, out)
      assert.are.equal(r.want, json.decode(out).status)
      rc, out = H.mend_cmd(db, "history " .. r.id .. " --json")
      assert.are.equal(0, rc, out)
      whole(r.id, r.want, json.decode(out))
    end

    -- A serve killed right after a commit took the answers of what it committed: the test met
    -- the window it means to.
    if self_killed > 0 then
      assert.is_true(n_existed + lost_made + n_dup + n_found > 0, "no write committed without its answer")
    end
    local checked = H.wall() - t_check
    local n_runs = 0
    for _ in pairs(runs) do n_runs = n_runs + 1 end
    local function fmt(list)
      local t = {}
      for i, v in ipairs(list) do t[i] = ("%.2f"):format(v) end
      return table.concat(t, " ")
    end
    print(("\n  seed %d, %d kills (%d of them a serve's own after a commit): %d runs (%d keyed starts, %d of them committed unanswered; %d unkeyed"
           .. " starts unanswered, %d of them made), %d events (%d keyed committed unanswered, %d unkeyed"
           .. " found unanswered), %d requests answered, no answer: %s; %d runs taken up again; down %s s,"
           .. " up in %s s; settled in %.1f s, checked in %.1f s")
      :format(seed, CYCLES, self_killed, n_runs, n_keyed, n_existed, n_lost, lost_made, n_events, n_dup, n_found,
              answered, json.encode(failures), recovered, fmt(down_for), fmt(up_in), settled, checked))
  end)
end)
