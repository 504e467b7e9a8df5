-- `mend serve` and `mend worker --listen`: a real server process on a free loopback port,
-- spoken to with curl. Each endpoint of /api/v1, each error code, the token rules, the limits
-- on bodies and headers, and /metrics, checked against the database the server works on.
local H = require "spec.helper"
local mend = require "mend"

local MEND, q, sh = H.MEND, H.quote, H.shell
local json = mend.json

local S = require "spec.support.serve_harness"
local workspace, dead_letter, start, stop_all = S.workspace, S.dead_letter, S.start, S.stop_all
local hold_write_lock, post_later, status_of = S.hold_write_lock, S.post_later, S.status_of
local read_by = S.read_by
local http, get, post, servers = S.http, S.get, S.post, S.servers

local function operator_details(base, id)
  local code, history = get(base, "/api/v1/runs/" .. id .. "/history")
  assert.are.equal(200, code)
  local out = {}
  for _, h in ipairs(history) do
    if h.event == "operator" then out[#out + 1] = h.detail end
  end
  return out
end

describe("mend serve", function()
  after_each(function()
    stop_all()
    H.cleanup()
  end)

  it("starts runs by workflow, input and key: the same key gives the same run", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" }, key = "k-1" })
    assert.are.equal(201, code)
    assert.are.equal(false, r.existed)
    local code2, r2 = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "bob" }, key = "k-1" })
    assert.are.equal(200, code2)
    assert.are.same({ id = r.id, workflow = "hello", existed = true }, r2)
    -- the key of a hello run, given with another workflow: refused, and nothing recorded
    local code3, r3 = post(base, "/api/v1/runs", { workflow = "refund", key = "k-1" })
    assert.are.equal(409, code3)
    assert.are.equal("key_conflict", r3.error.code)
    assert.truthy(r3.error.message:find("a run of workflow hello, not refund", 1, true), r3.error.message)
    local _, other = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "cy" } })
    assert.are_not.equal(r.id, other.id)
    local _, run = get(base, "/api/v1/runs/" .. r.id)
    assert.are.equal("running", run.status)            -- left for a worker
    assert.are.same({ to = "ann" }, run.input)
    assert.are.equal("k-1", run.key)
    assert.are.same({ "greet", "bye" }, { run.steps[1].name, run.steps[2].name })
    -- the database holds what the API said
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM runs"))
    assert.are.same({ r.id }, H.sql(db, "SELECT id FROM runs WHERE run_key = 'k-1'"))
  end)

  it("answers starts arriving together once they are committed; the same key at once gives one run", function()
    local dir, db = workspace()
    local base = start(dir, db)
    -- 50 clients at once: 30 on 10 keys (three each), 20 without one
    local cmds = {}
    for i = 1, 50 do
      local body = { workflow = "hello", input = { to = "c" .. i } }
      if i <= 30 then body.key = "dup-" .. (i % 10) end
      local f = assert(io.open(dir .. "/body." .. i, "wb"))
      f:write(json.encode(body))
      f:close()
      cmds[#cmds + 1] = "curl -s -m 20 -o " .. q(dir .. "/answer." .. i) .. " -w '%{http_code}' " ..
        "-H 'Content-Type: application/json' --data-binary @" .. q(dir .. "/body." .. i) .. " " ..
        q(base .. "/api/v1/runs") .. " >" .. q(dir .. "/code." .. i) .. " &"
    end
    local rc = sh(table.concat(cmds, "\n") .. "\nwait")
    assert.are.equal(0, rc)
    local by_key, ids, created = {}, {}, {}
    for i = 1, 50 do
      local code, answer = tonumber(H.read(dir .. "/code." .. i)), json.decode(H.read(dir .. "/answer." .. i))
      assert.is_true(code == 201 or code == 200, "answer " .. i .. ": " .. tostring(code))
      assert.are.equal(code == 200, answer.existed)
      ids[answer.id] = true
      if i <= 30 then
        local key = "dup-" .. (i % 10)
        by_key[key] = by_key[key] or answer.id
        assert.are.equal(by_key[key], answer.id, "the same key gave two runs")
        if not answer.existed then created[key] = (created[key] or 0) + 1 end
      end
    end
    for k = 0, 9 do assert.are.equal(1, created["dup-" .. k], "dup-" .. k .. " created once") end
    -- every run an answer named is in the database, read while the server still runs
    local named = {}
    for id in pairs(ids) do named[#named + 1] = "'" .. id .. "'" end
    assert.are.equal(30, #named)
    assert.are.same({ "30" }, H.sql(db, "SELECT count(*) FROM runs WHERE id IN ("
                                        .. table.concat(named, ", ") .. ")"))
    assert.are.same({ "30" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  it("answers events arriving together once they are committed; the same key at once is one event", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local _, run = post(base, "/api/v1/runs", { workflow = "wait", input = {} })
    local cmds = {}
    for i = 1, 20 do
      local f = assert(io.open(dir .. "/event." .. i, "wb"))
      f:write(json.encode { name = "payment", key = "e-" .. (i % 5), data = { i = i } })
      f:close()
      cmds[#cmds + 1] = "curl -s -m 20 -o " .. q(dir .. "/ev-answer." .. i) .. " -w '%{http_code}' " ..
        "-H 'Content-Type: application/json' --data-binary @" .. q(dir .. "/event." .. i) .. " " ..
        q(base .. "/api/v1/runs/" .. run.id .. "/events") .. " >" .. q(dir .. "/ev-code." .. i) .. " &"
    end
    assert.are.equal(0, (sh(table.concat(cmds, "\n") .. "\nwait")))
    local sent = {}
    for i = 1, 20 do
      local code, answer = tonumber(H.read(dir .. "/ev-code." .. i)), json.decode(H.read(dir .. "/ev-answer." .. i))
      assert.is_true(code == 202 or code == 200, "answer " .. i .. ": " .. tostring(code))
      assert.are.equal(code == 202, answer.sent)
      if answer.sent then sent["e-" .. (i % 5)] = (sent["e-" .. (i % 5)] or 0) + 1 end
    end
    for k = 0, 4 do assert.are.equal(1, sent["e-" .. k], "e-" .. k .. " sent once") end
    assert.are.same({ "5" }, H.sql(db, "SELECT count(*) FROM inbox WHERE run_id = '" .. run.id .. "'"))
  end)

  it("answers a start whose commit fails with a storage error, and no run exists", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })
    assert.are.equal(201, code)
    -- the database refuses the row only when the batch that holds it is written
    if H.is_pg(db) then
      H.sql(db, "CREATE FUNCTION boom() RETURNS trigger AS $$ BEGIN IF NEW.input LIKE '%boom%' " ..
        "THEN RAISE EXCEPTION 'refused by a trigger'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql; " ..
        "CREATE TRIGGER boom BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION boom()")
    else
      H.sql(db, "CREATE TRIGGER boom BEFORE INSERT ON runs WHEN NEW.input LIKE '%boom%' " ..
        "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END")
    end
    local code2, e = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "boom" }, key = "k-boom" })
    assert.are.equal(503, code2)
    assert.are.equal("storage", e.error.code)
    assert.matches("refused by a trigger", e.error.message)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs WHERE run_key = 'k-boom'"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  it("goes on after a client that left before its start was committed; the run is kept", function()
    local dir, db = workspace()
    local base = start(dir, db)
    assert.are.equal(201, (post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })))
    -- another process holds the write lock: the start's answer waits for its commit, and its
    -- client gives up after 1 s
    local release = hold_write_lock(db, 30)
    local body = q(json.encode { workflow = "hello", input = { to = "gone" }, key = "k-gone" })
    local rc = sh("curl -s -m 1 -o /dev/null -H 'Content-Type: application/json' -d " .. body .. " " ..
                  q(base .. "/api/v1/runs"))
    assert.are_not.equal(0, rc)   -- curl timed out: no answer came while the lock was held
    release()
    H.wait_for("the start to be committed", function()
      return H.sql(db, "SELECT count(*) FROM runs WHERE run_key = 'k-gone'")[1] == "1"
    end, 10)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "again" }, key = "k-gone" })
    assert.are.equal(200, code)
    assert.are.same(H.sql(db, "SELECT id FROM runs WHERE run_key = 'k-gone'"), { r.id })
  end)

  -- The docs promise a start waits for another process's lock to go: without a key it joins
  -- the open batch, and its answer comes once that batch is committed after the lock.
  it("answers a start made while another process holds the write lock once the lock goes", function()
    local dir, db = workspace()
    dead_letter(dir, db)   -- its breaker psp exists
    local base = start(dir, db)
    assert.are.equal(201, (post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })))
    local release = hold_write_lock(db, 30)
    local held = post_later(dir, base, "/api/v1/runs",
                            { workflow = "hello", input = { to = "held" } }, "held")
    -- PostgreSQL's /metrics reads the table the lock holds (503): nothing there tells that the
    -- request was read, which a pause lets happen
    if H.is_pg(db) then os.execute("sleep 0.3") else read_by(dir, base, { "held" }) end
    local released = release()
    local code, r, _, done = held()
    assert.are.equal(201, code)
    assert.is_true(done >= released, "answered before the lock went")
    assert.is_true(done - released < 10,
                   "answered " .. (done - released) .. " s after the lock went")
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs WHERE id = '" .. r.id .. "'"))
    if H.is_pg(db) then return end
    -- a breaker override waits for the lock as a start does, the server answering the rest
    release = hold_write_lock(db, 30)
    local answer = post_later(dir, base, "/api/v1/breakers/psp/open", {}, "breaker")
    read_by(dir, base, { "breaker" })
    local t0 = H.wall()
    assert.are.equal(200, (get(base, "/api/v1/breakers")))
    assert.is_true(H.wall() - t0 < 1, "answered after " .. (H.wall() - t0) .. " s")
    released = release()
    local b
    code, b, _, done = answer()
    assert.are.equal(200, code, json.encode(b))
    assert.are.same({ key = "psp", op = "open", state = "open" }, b)
    assert.is_true(done >= released, "answered before the lock went")
    assert.are.same({ "open" }, H.sql(db, "SELECT state FROM breakers WHERE key = 'psp'"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM audit WHERE op = 'open' AND target = 'psp'"))
    -- two overrides under the lock of a breaker no workflow here uses (another host's): the
    -- second's audit names the first's state as the one it changed
    H.sql(db, "INSERT INTO breakers(key, state, failures, successes, updated) VALUES ('ext', 'closed', 0, 0, 1)")
    release = hold_write_lock(db, 30)
    local opening = post_later(dir, base, "/api/v1/breakers/ext/open", {}, "opening")
    read_by(dir, base, { "opening" })
    local closing = post_later(dir, base, "/api/v1/breakers/ext/close", {}, "closing")
    read_by(dir, base, { "opening", "closing" })
    release()
    assert.are.equal(200, (opening()))
    assert.are.equal(200, (closing()))
    assert.are.same({ "closed" }, H.sql(db, "SELECT state FROM breakers WHERE key = 'ext'"))
    assert.are.same({ "closed -> open", "open -> closed" },
                    H.sql(db, "SELECT detail FROM audit WHERE target = 'ext' ORDER BY seq"))
  end)

  -- A start with a key looks its key up in the batch that records it: under another
  -- process's lock it waits for the lock like any start, and the server answers the rest
  -- meanwhile, from what is committed.
  it("answers a keyed start made under another process's lock once the lock goes, and reads meanwhile #sqlite", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, first = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })
    assert.are.equal(201, code)
    local release = hold_write_lock(db, 30)
    local answer = post_later(dir, base, "/api/v1/runs", { workflow = "hello", input = { to = "k" }, key = "k-held" }, "keyed")
    read_by(dir, base, { "keyed" })
    -- while the start waits for the lock, reads are answered at once, from committed rows
    for _, path in ipairs { "/api/v1/runs", "/api/v1/runs/" .. first.id, "/api/v1/runs/" .. first.id .. "/history",
                            "/api/v1/dlq", "/api/v1/breakers", "/api/v1/workflows", "/metrics" } do
      local t0 = H.wall()
      local c, body = get(base, path)
      assert.are.equal(200, c, path .. ": " .. json.encode(body))
      assert.is_true(H.wall() - t0 < 1, path .. " answered after " .. (H.wall() - t0) .. " s")
    end
    local _, list = get(base, "/api/v1/runs")
    assert.are.equal(1, #list.runs)   -- the keyed start is not committed yet: not shown
    local released = release()
    local c, r, _, done = answer()
    assert.are.equal(201, c, json.encode(r))
    assert.is_false(r.existed)
    assert.is_true(done >= released, "answered before the lock went")
    assert.are.same({ r.id }, H.sql(db, "SELECT id FROM runs WHERE run_key = 'k-held'"))
    -- the same key again: the same run, answered at once
    local again
    code, again = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "k2" }, key = "k-held" })
    assert.are.equal(200, code)
    assert.are.same({ id = r.id, workflow = "hello", existed = true }, again)
    -- a key of another workflow's run is refused, under the lock too
    release = hold_write_lock(db, 30)
    local other = post_later(dir, base, "/api/v1/runs", { workflow = "wait", key = "k-held" }, "other")
    read_by(dir, base, { "other" })
    release()
    local oc, oe = other()
    assert.are.equal(409, oc)
    assert.are.equal("key_conflict", oe.error.code)
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  it("gives one run for the same key started on two servers at once under a lock #sqlite", function()
    local dir, db = workspace()
    local a = start(dir, db)
    local b = start(dir, db)
    for _, base in ipairs { a, b } do
      assert.are.equal(201, (post(base, "/api/v1/runs", { workflow = "hello", input = { to = "ann" } })))
    end
    local release = hold_write_lock(db, 30)
    local answers = {}
    for i, base in ipairs { a, b, a, b } do
      answers[i] = post_later(dir, base, "/api/v1/runs", { workflow = "hello", input = { n = i }, key = "k-both" }, "both" .. i)
    end
    read_by(dir, a, { "both1", "both3" })   -- all four are read by their servers under the lock
    read_by(dir, b, { "both2", "both4" })
    release()
    local ids, created = {}, 0
    for i = 1, 4 do
      local c, r = answers[i]()
      assert.is_true(c == 201 or c == 200, tostring(c) .. " " .. json.encode(r))
      assert.are.equal(c == 201, not r.existed)
      if c == 201 then created = created + 1 end
      ids[r.id] = true
    end
    assert.are.equal(1, created)
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs WHERE run_key = 'k-both'"))
    local id = H.sql(db, "SELECT id FROM runs WHERE run_key = 'k-both'")[1]
    assert.are.same({ [id] = true }, ids)
    -- and no history of a run that lost the key
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM history WHERE run_id NOT IN (SELECT id FROM runs)"))
    -- nor a start counted for it: the two servers started three runs between them
    local started = 0
    for _, base in ipairs { a, b } do
      local _, _, text = get(base, "/metrics")
      started = started + tonumber(text:match('mend_runs_started_total{workflow="hello"} (%d+)'))
    end
    assert.are.equal(3, started)
  end)

  it("keeps an event sent under another process's lock and answers it once recorded #sqlite", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local log = dir .. "/worker.log"
    local worker = H.spawn_worker(db, dir, log)
    servers[#servers + 1] = worker
    local code, r = post(base, "/api/v1/runs", { workflow = "wait", key = "w-1" })
    assert.are.equal(201, code)
    H.wait_for("the run to wait for its event", function()
      return H.sql(db, "SELECT count(*) FROM history WHERE run_id = '" .. r.id .. "'")[1] ~= "1" and
             status_of(base, r.id) == "running"
    end, 10)
    local release = hold_write_lock(db, 30)
    local answer = post_later(dir, base, "/api/v1/runs/" .. r.id .. "/events",
                              { name = "payment", data = { amount = 7 } }, "event")
    local by_key = post_later(dir, base, "/api/v1/events",
                              { run_key = "w-1", name = "note", data = 1 }, "event2")
    read_by(dir, base, { "event", "event2" })
    local t0 = H.wall()
    assert.are.equal(200, (get(base, "/api/v1/runs/" .. r.id .. "/events")))
    assert.is_true(H.wall() - t0 < 1)
    local released = release()
    local c, sent, _, done = answer()
    assert.are.equal(202, c, json.encode(sent))
    assert.is_true(sent.sent)
    assert.is_true(done >= released, "answered before the lock went")
    c, sent = by_key()
    assert.are.equal(202, c, json.encode(sent))
    assert.are.equal(r.id, sent.run)
    H.wait_for("the run to take its event", function() return status_of(base, r.id) == "succeeded" end, 10)
    local _, run = get(base, "/api/v1/runs/" .. r.id)
    assert.are.same({ amount = 7 }, run.steps[2].result)
  end)

  it("refuses a start it cannot make, naming the problem", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, e = post(base, "/api/v1/runs", { input = {} })
    assert.are.equal(400, code)
    assert.are.equal("missing_field", e.error.code)
    assert.matches('"workflow"', e.error.message)
    code, e = post(base, "/api/v1/runs", { workflow = 7 })
    assert.are.equal(400, code)
    assert.matches('"workflow" must be a non%-empty string', e.error.message)
    code, e = post(base, "/api/v1/runs", '{"workflow": "hello",')
    assert.are.equal(400, code)
    assert.are.equal("bad_json", e.error.code)
    code, e = post(base, "/api/v1/runs", "[1, 2]")
    assert.are.equal(400, code)
    assert.matches("must be a JSON object", e.error.message)
    code, e = post(base, "/api/v1/runs", { workflow = "nope" })
    assert.are.equal(404, code)
    assert.are.equal("unknown_workflow", e.error.code)
    assert.matches("no workflow nope", e.error.message)
    -- an input nested past 100 levels is the request's fault, refused naming its field
    code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "input": ' .. ("["):rep(150) ..
                   ("]"):rep(150) .. "}")
    assert.are.equal(400, code)
    assert.are.equal("bad_field", e.error.code)
    assert.matches('"input" is nested deeper than 100 levels', e.error.message)
    code, e = post(base, "/api/v1/runs", "workflow=hello", { type = "application/x-www-form-urlencoded" })
    assert.are.equal(415, code)
    assert.matches("Content%-Type: application/json", e.error.message)
    -- numbers past 64-bit integers, and NUL in strings, as docs/http-api.md says
    for _, input in ipairs { "18446744073709552000", '"a\\u0000b"' } do
      code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "input": ' .. input .. "}")
      assert.are.equal(400, code, input)
      assert.are.equal("bad_json", e.error.code, input)
    end
    code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "input": 18446744073709552000}')
    assert.matches("the integer 18446744073709552000 is past 64 bits .*: send it as a string",
                   e.error.message)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs"))
    local run
    code, run = post(base, "/api/v1/runs", '{"workflow": "hello", "input": [1.8446744073709552e19, 9223372036854775807]}')
    assert.are.equal(201, code)
    local _, shown = get(base, "/api/v1/runs/" .. run.id)
    assert.are.same({ 1.8446744073709552e19, math.maxinteger }, shown.input)
  end)

  it("says a start's workflow file failed to load, and why, as the log says", function()
    for _, command in ipairs { "serve", "worker" } do
      local dir, db = workspace()
      H.write_file(dir, "broken.lua", "return { name = 'broken', steps = {\n")
      local base = start(dir, db, "--listen 127.0.0.1:0", command)
      local code, e = post(base, "/api/v1/runs", { workflow = "broken" })
      assert.are.equal(503, code, command)
      assert.are.equal("workflow_failed_to_load", e.error.code, command)
      local logged
      for line in H.read(dir .. "/serve.err"):gmatch("[^\n]+") do
        local ok, entry = pcall(json.decode, line)
        if ok and type(entry) == "table" and entry.event == "workflow" then logged = entry.message end
      end
      assert.truthy(logged, command .. ": the load error in the log")
      assert.matches("broken%.lua:%d+:", logged)
      assert.are.equal("workflow broken cannot start: its file broken.lua failed to load: " ..
                       logged, e.error.message)
      -- the other files serve, and a name of no file at all is still unknown
      code = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
      assert.are.equal(201, code, command)
      -- a name no file loaded as: a broken file may hold it under another file name (its name
      -- cannot be read from it), so the 404 names the broken files
      code, e = post(base, "/api/v1/runs", { workflow = "nope" })
      assert.are.equal(404, code, command)
      assert.are.equal("unknown_workflow", e.error.code, command)
      assert.matches("; a file that failed to load may hold it: broken%.lua %(.-broken%.lua:%d+:",
                     e.error.message, 1)
      -- a broken file removed is no failure to report: the workflow is unknown
      os.remove(dir .. "/broken.lua")
      code, e = post(base, "/api/v1/runs", { workflow = "broken" })
      assert.are.equal(404, code, command)
      assert.are.equal("unknown_workflow", e.error.code, command)
      assert.is_nil(e.error.message:find("failed to load", 1, true), command)
      stop_all()
    end
  end)

  it("lists runs with filters, and pages through them with a cursor", function()
    local dir, db = workspace()
    local dead = dead_letter(dir, db)
    local base = start(dir, db)
    local ids = { [dead] = true }
    for i = 1, 6 do
      local _, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = tostring(i) } })
      ids[r.id] = true
    end
    local seen, pages, cursor = {}, 0, nil
    repeat
      local code, page = get(base, "/api/v1/runs?limit=3" .. (cursor and ("&cursor=" .. cursor) or ""))
      assert.are.equal(200, code)
      pages = pages + 1
      for _, r in ipairs(page.runs) do
        assert.is_nil(seen[r.id], "a run listed twice")
        seen[r.id] = true
      end
      cursor = page.next_cursor ~= json.null and page.next_cursor or nil
      if cursor then cursor = cursor:gsub("[^%w%.%-_~]", function(c) return ("%%%02X"):format(c:byte()) end) end
    until not cursor
    assert.are.equal(3, pages)
    assert.are.same(ids, seen)
    local _, att = get(base, "/api/v1/runs?status=needs_attention")
    assert.are.equal(1, #att.runs)
    assert.are.equal(dead, att.runs[1].id)
    local _, hello = get(base, "/api/v1/runs?workflow=hello&limit=100")
    assert.are.equal(6, #hello.runs)
    local _, future = get(base, "/api/v1/runs?since=4000000000")
    assert.are.equal(0, #future.runs)
    local code, e = get(base, "/api/v1/runs?status=done")
    assert.are.equal(400, code)
    assert.matches('status must be one of .* got "done"', e.error.message)
    code, e = get(base, "/api/v1/runs?limit=0")
    assert.are.equal(400, code)
    assert.matches("limit must be", e.error.message)
    code, e = get(base, "/api/v1/runs?cursor=nonsense")
    assert.are.equal(400, code)
    assert.matches("cursor", e.error.message)
  end)

  it("shows a run, its history and its events; sends events once per key", function()
    local dir, db = workspace()
    local dead = dead_letter(dir, db)
    local base = start(dir, db)
    local _, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" }, key = "run-k" })
    local code, history = get(base, "/api/v1/runs/" .. r.id .. "/history")
    assert.are.equal(200, code)
    assert.are.equal("running", history[1].to)
    code = get(base, "/api/v1/runs/0000000000000000")
    assert.are.equal(404, code)
    code = get(base, "/api/v1/runs/0000000000000000/history")
    assert.are.equal(404, code)
    local sent
    code, sent = post(base, "/api/v1/runs/" .. r.id .. "/events", { name = "paid", data = { n = 1 }, key = "e1" })
    assert.are.equal(202, code)
    assert.are.same({ run = r.id, event = "paid", sent = true }, sent)
    code, sent = post(base, "/api/v1/runs/" .. r.id .. "/events", { name = "paid", data = { n = 2 }, key = "e1" })
    assert.are.equal(200, code)
    assert.are.equal(true, sent.duplicate)
    code, sent = post(base, "/api/v1/events", { run_key = "run-k", name = "shipped" })
    assert.are.equal(202, code)
    assert.are.equal(r.id, sent.run)
    local _, inbox = get(base, "/api/v1/runs/" .. r.id .. "/events")
    assert.are.equal(2, #inbox)
    assert.are.same({ n = 1 }, inbox[1].payload)
    local e
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/events", { data = 1 })
    assert.are.equal(400, code)
    assert.matches('"name"', e.error.message)
    code = post(base, "/api/v1/runs/0000000000000000/events", { name = "paid" })
    assert.are.equal(404, code)
    code, e = post(base, "/api/v1/runs/" .. dead .. "/events", { name = "paid" })
    assert.are.equal(409, code)
    assert.are.equal("conflict", e.error.code)
  end)

  it("gives a long history in pages that join to the whole, its tail, and 400 for bad ones", function()
    local dir, db = workspace()
    -- 700 attempts on the virtual clock: thousands of history rows in about a second, with no
    -- sync of the file at each commit (--durability process): the rows are what the server
    -- pages through, their durability is not the test's (synced, they took 9-11 s under load).
    H.write_file(dir, "loop.lua", [[
local mend = require "mend"
return { name = "loop", steps = {
  { name = "try", retry = { max_attempts = 700, initial = 0.001, max_delay = 0.001, jitter = 0 },
    execute = function() error(mend.retryable("not yet")) end } } }
]])
    local rc, out = sh(MEND .. " run " .. q(dir .. "/loop.lua") .. " --db " .. q(db) ..
                       " --clock virtual --durability process --json 2>/dev/null")
    assert.are.equal(4, rc, out)
    local id = json.decode(out:match("(%b{})%s*$")).id
    local _, whole_text = sh(MEND .. " history " .. id .. " --db " .. q(db) .. " --json")
    local whole = json.decode(whole_text)
    assert.is_true(#whole > 2500, "rows: " .. #whole)
    local base = start(dir, db)
    local path = "/api/v1/runs/" .. id .. "/history"

    -- Without parameters: the first 1000 rows, and a link to the next page.
    local code, page, _, headers = get(base, path)
    assert.are.equal(200, code)
    assert.are.equal(1000, #page)
    assert.are.same(whole[1], page[1])
    assert.matches('[Ll]ink: <' .. path:gsub("%p", "%%%0") .. '%?after=1000&limit=1000>; rel="next"',
                   headers)

    -- Following the links joins the pages to the whole: no row twice, none missing.
    local joined, next_path, pages = {}, path .. "?limit=700", 0
    while next_path do
      code, page, _, headers = get(base, next_path)
      assert.are.equal(200, code)
      pages = pages + 1
      for _, row in ipairs(page) do joined[#joined + 1] = row end
      next_path = headers:match('[Ll]ink: <([^>]*)>; rel="next"')
      if next_path then assert.are.equal(700, #page) end
    end
    assert.are.equal(math.ceil(#whole / 700), pages)
    assert.are.same(whole, joined)

    -- The rule without the link: after = the last seq until fewer than limit come back.
    code, page, _, headers = get(base, path .. "?after=" .. whole[#whole - 3].seq .. "&limit=10")
    assert.are.equal(200, code)
    assert.are.same({ whole[#whole - 2], whole[#whole - 1], whole[#whole] }, page)
    assert.is_nil(headers:match("[Ll]ink:"))
    -- The link names this server's path whatever path the router was lenient with: "//api/..."
    -- copied would be a reference to another host.
    code, page, _, headers = get(base, "/" .. path .. "?limit=2")
    assert.are.equal(200, code)
    assert.matches('[Ll]ink: <' .. path:gsub("%p", "%%%0") .. '%?after=2&limit=2>', headers)

    -- The tail is the whole's last rows, in order.
    code, page = get(base, path .. "?tail=20")
    assert.are.equal(200, code)
    assert.are.same(table.move(whole, #whole - 19, #whole, 1, {}), page)
    code, page = get(base, path .. "?tail=10000")
    assert.are.same(whole, page)

    for param, values in pairs { after = { "-1", "x", "99999999999999999999999" },
                                 limit = { "0", "-5", "ten", "10001", "1e3", "%2B2", "%202" },
                                 tail = { "0", "-1", "x", "10001" } } do
      for _, v in ipairs(values) do
        local e
        code, e = get(base, path .. "?" .. param .. "=" .. v)
        assert.are.equal(400, code, param .. "=" .. v)
        assert.are.equal("bad_query", e.error.code)
        assert.matches("^" .. param .. " must be a whole number", e.error.message)
      end
    end
    local e
    code, e = get(base, path .. "?tail=5&after=3")
    assert.are.equal(400, code)
    assert.matches("tail .* without after", e.error.message)
    code = get(base, "/api/v1/runs/0000000000000000/history?tail=5")
    assert.are.equal(404, code)
  end)

  it("cancels a run, recording who asked; a second cancel is a conflict", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local _, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    local code, c = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil, { who = "alice  " })
    assert.are.equal(202, code)
    assert.are.equal("cancelling", c.cancel)
    H.wait_for("the cancel", function() return status_of(base, r.id) == "failed" end, 10)
    local details = operator_details(base, r.id)
    assert.are.equal(1, #details)
    assert.matches("^cancel by alice via http 127%.0%.0%.1:%d+ %(mend serve%)$", details[1])
    local e
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/cancel")
    assert.are.equal(409, code)
    assert.matches("only a running run can be cancelled", e.error.message)
    code = post(base, "/api/v1/runs/0000000000000000/cancel")
    assert.are.equal(404, code)
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil, { who = "bad\tname" })
    assert.are.equal(400, code)
    assert.matches("X%-Mend%-Who", e.error.message)
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil,
                   { headers = { "X-Mend-Who;" } })                 -- curl's way to send it empty
    assert.are.equal(400, code)
    assert.are.equal("bad_header", e.error.code)
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil,
                   { headers = { "X-Mend-Who: alice", "X-Mend-Who: mallory" } })
    assert.are.equal(400, code)
    assert.matches("X%-Mend%-Who is given twice", e.error.message)
  end)

  it("lists dead letters, retries one to its end here and resolves another with a note", function()
    local dir, db = workspace()
    local first, flag = dead_letter(dir, db)
    local second = dead_letter(dir, db, "refund-down-2")
    local base = start(dir, db)
    local code, dlq = get(base, "/api/v1/dlq")
    assert.are.equal(200, code)
    assert.are.equal(2, #dlq)
    assert.are.equal("compensation_failed", dlq[1].reason)
    local e
    code, e = post(base, "/api/v1/dlq/" .. second .. "/resolve", {})
    assert.are.equal(400, code)
    assert.matches('"note"', e.error.message)
    os.remove(flag)                                   -- the refund service is back
    code = post(base, "/api/v1/dlq/" .. first .. "/retry", nil, { who = "bob" })
    assert.are.equal(202, code)
    H.wait_for("the retried run", function() return status_of(base, first) == "compensated" end, 10)
    assert.are.same({ "dlq retry by bob via http" }, { (operator_details(base, first)[1]:match("^dlq retry by bob via http")) })
    code, e = post(base, "/api/v1/dlq/" .. first .. "/retry")
    assert.are.equal(409, code)
    code = post(base, "/api/v1/dlq/" .. second .. "/resolve", { note = "refunded by hand" }, { who = "carol" })
    assert.are.equal(200, code)
    assert.are.equal("resolved", status_of(base, second))
    assert.matches("^dlq resolve by carol via http .*: refunded by hand$", operator_details(base, second)[1])
    local _, left = get(base, "/api/v1/dlq")
    assert.are.equal(0, #left)
    code = post(base, "/api/v1/dlq/0000000000000000/retry")
    assert.are.equal(404, code)
    code = post(base, "/api/v1/dlq/" .. second .. "/requeue")
    assert.are.equal(404, code)
  end)

  it("opens, closes and resets breakers, recording who did it", function()
    local dir, db = workspace()
    dead_letter(dir, db)
    local base = start(dir, db)
    local code, list = get(base, "/api/v1/breakers")
    assert.are.equal(200, code)
    local keys = {}
    for _, b in ipairs(list) do keys[b.key] = b.state end
    assert.are.equal("closed", keys.psp)
    local b
    code, b = post(base, "/api/v1/breakers/psp/open", { seconds = 60 }, { who = "dave" })
    assert.are.equal(200, code)
    assert.are.same({ key = "psp", op = "open", state = "open" }, b)
    assert.are.same({ "open" }, H.sql(db, "SELECT state FROM breakers WHERE key = 'psp'"))
    code, b = post(base, "/api/v1/breakers/psp/close")
    assert.are.equal(200, code)
    assert.are.equal("closed", b.state)
    code = post(base, "/api/v1/breakers/psp/reset")
    assert.are.equal(200, code)
    local audit = H.sql(db, "SELECT op || ' ' || who FROM audit ORDER BY seq")
    assert.are.equal(3, #audit)
    assert.matches("^open dave via http 127%.0%.0%.1:%d+ %(mend serve%)$", audit[1])
    local e
    code, e = post(base, "/api/v1/breakers/psp/close", { seconds = 5 })
    assert.are.equal(400, code)
    assert.matches('"seconds"', e.error.message)
    code = post(base, "/api/v1/breakers/nope/open")
    assert.are.equal(404, code)
    code = post(base, "/api/v1/breakers/psp/explode")
    assert.are.equal(404, code)
  end)

  it("lists workflows and the versions of one", function()
    local dir, db = workspace()
    dead_letter(dir, db)
    local base = start(dir, db)
    local code, all = get(base, "/api/v1/workflows")
    assert.are.equal(200, code)
    assert.are.equal("refund", all[1].workflow)
    local versions
    code, versions = get(base, "/api/v1/workflows/refund")
    assert.are.equal(200, code)
    assert.are.equal(1, #versions)
    assert.are.same({ "reserve", "charge", "ship" }, versions[1].step_names)
    code = get(base, "/api/v1/workflows/nope")
    assert.are.equal(404, code)
  end)

  it("answers errors as JSON: unknown paths, wrong methods, bodies and headers too large", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --max-body 1000")
    local code, index = get(base, "/api/v1")
    assert.are.equal(200, code)
    assert.is_true(#index.endpoints >= 15)
    local e, headers, _
    code, e, _, headers = get(base, "/api/v2/runs")
    assert.are.equal(404, code)
    assert.are.equal("not_found", e.error.code)
    assert.matches("content%-type: application/json", headers:lower())
    assert.is_nil(headers:lower():match("access%-control"))   -- no CORS unless asked
    code, e = get(base, "/api/v1/runs/x/cancel")
    assert.are.equal(405, code)
    assert.are.equal("method_not_allowed", e.error.code)
    code = http(base, "DELETE", "/api/v1/runs")
    assert.are.equal(405, code)
    code, e = get(base, "/api/v1/runs?status=%zz")
    assert.are.equal(400, code)
    assert.matches("query parameter status has a malformed percent%-escape", e.error.message)
    code, e = get(base, "/api/v1/runs/%zz")
    assert.are.equal(400, code)
    assert.are.equal("bad_path", e.error.code)
    local big = json.encode{ workflow = "hello", input = { pad = ("x"):rep(2000) } }
    code, e, _, headers = post(base, "/api/v1/runs", big)
    assert.are.equal(413, code)                               -- refused by h2o, answered as JSON
    assert.are.equal("body_too_large", e.error.code)
    assert.matches("over the limit of 1000 bytes", e.error.message)
    assert.matches("content%-type: application/json", headers:lower())
    code, e = post(base, "/api/v1/runs", big, { headers = { "Transfer-Encoding: chunked" } })
    assert.are.equal(413, code)                               -- no length given: found reading
    assert.are.equal("body_too_large", e.error.code)
    -- a body whose framing h2o cannot read is refused by h2o too, as JSON all the same
    local rc, out = sh("python3 -c " .. q([[
import socket
s = socket.create_connection(("127.0.0.1", ]] .. base:match(":(%d+)$") .. [[), timeout=20)
s.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
answer = b""
while True:
    got = s.recv(65536)
    if not got: break
    answer += got
print(answer.decode())
]]))
    assert.are.equal(0, rc, out)
    assert.matches("^HTTP/1%.1 400 ", out)
    assert.matches("content%-type: application/json", out:lower())
    assert.are.equal("bad_request", json.decode(out:match("(%b{})%s*$")).error.code)
    -- the dashboard's path is an endpoint that takes GET
    code, e, _, headers = post(base, "/", {})
    assert.are.equal(405, code)
    assert.are.equal("method_not_allowed", e.error.code)
    assert.matches("allow: GET, HEAD", headers)
    code, e, _, headers = post(base, "/ui", {})
    assert.are.equal(405, code)
    -- whatever the method, the page's Allow is its own
    local rc2, put = sh("curl -s -i -X PUT " .. q(base .. "/ui"))
    assert.are.equal(0, rc2, put)
    assert.matches("^HTTP/1%.1 405 ", put)
    assert.matches("\nallow: GET, HEAD\r?\n", put:lower():gsub("get, head", "GET, HEAD"))
    -- and so is each endpoint's: a client that follows Allow is not sent to another 405
    for path, allow in pairs{ ["/api/v1/runs/x/cancel"] = "POST", ["/api/v1/runs/x"] = "GET, HEAD",
                              ["/metrics"] = "GET, HEAD", ["/api/v1/events"] = "POST",
                              ["/api/v1/runs"] = "GET, HEAD, POST",
                              ["/api/v1/runs/x/events"] = "GET, HEAD, POST" } do
      code, e, _, headers = http(base, "PUT", path)
      assert.are.equal(405, code, path)
      assert.matches("method PUT is not served here", e.error.message)
      assert.are.equal(allow, headers:match("\n[Aa]llow: ([^\r\n]*)"), path)
    end
    local many = {}
    for i = 1, 101 do many[i] = "X-Pad-" .. i .. ": y" end
    code = get(base, "/api/v1/runs", { headers = many })
    assert.are.equal(400, code)                               -- h2o's, before any request
    code, e = get(base, "/api/v1/runs", { headers = { "X-Pad: " .. ("y"):rep(20000) } })
    assert.are.equal(431, code)
    assert.matches("header fields", e.error.message)
    -- nested deeper than mend encodes from Lua: a step could take it but never return it
    local deep = ("["):rep(101) .. ("]"):rep(101)
    code, e = post(base, "/api/v1/runs", '{"workflow":"hello","input":' .. deep .. '}')
    assert.are.equal(400, code)
    assert.are.equal("bad_field", e.error.code)
    assert.matches('"input" is nested deeper than 100 levels', e.error.message)
    code = post(base, "/api/v1/runs", json.encode{ workflow = "hello", input = { to = "small" } })
    assert.are.equal(201, code)                               -- within the limit
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
    -- 100 levels with a value at the bottom are what mend start --input and the Lua API take
    local hundred = ("["):rep(100) .. "1" .. ("]"):rep(100)
    assert.are.equal(hundred, json.encode(json.decode(hundred)))
    code, e = post(base, "/api/v1/runs", '{"workflow":"hello","input":' .. hundred .. '}')
    assert.are.equal(201, code, e and e.error and e.error.message)
  end)

  -- Many clients (Python's urllib and http.client, Java's HttpURLConnection) write the whole
  -- body before they read a byte of the answer; curl reads as it sends, and saw the 413
  -- whatever the server did with the bytes it had not read.
  it("answers 413 to a client that writes its whole body before it reads", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --max-body 1000")
    local port = base:match(":(%d+)$")
    local rc, out = sh("python3 -c " .. q([[
import socket
body = b'{"workflow":"hello","input":"' + b"x" * 3000000 + b'"}'
head = b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
for _ in range(3):
    s = socket.create_connection(("127.0.0.1", ]] .. port .. [[), timeout=20)
    try:
        s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        answer = b""
        while True:
            got = s.recv(65536)
            if not got: break
            answer += got
        print(answer.split(b"\r\n")[0].decode(), answer.split(b"\r\n\r\n", 1)[-1].decode())
    except OSError as e:
        print("lost:", e)
    s.close()
]]))
    assert.are.equal(0, rc, out)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      n = n + 1
      assert.matches("^HTTP/1%.1 413 .*\"body_too_large\"", line)
    end
    assert.are.equal(3, n, out)
    local code = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "after" } })
    assert.are.equal(201, code)
  end)

  -- A refused connection is kept open a while after its answer (above): a process a step
  -- starts meanwhile (mend.exec, an alert command) must not inherit it, or the client's
  -- connection outlives the server's hold on it.
  it("keeps no descriptor of a lingering connection across an exec", function()
    local dir, db = workspace()
    local base, pid = start(dir, db, "--listen 127.0.0.1:0 --max-body 1000")
    local port = base:match(":(%d+)$")
    local rc, out = sh("python3 -c " .. q([[
import os, socket, stat
s = socket.create_connection(("127.0.0.1", ]] .. port .. [[), timeout=20)
s.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n")
assert s.recv(4096).startswith(b"HTTP/1.1 413")
sockets, inherited = 0, []
for fd in os.listdir("/proc/]] .. pid .. [[/fd"):
    try:
        if not os.readlink("/proc/]] .. pid .. [[/fd/" + fd).startswith("socket:"): continue
        flags = open("/proc/]] .. pid .. [[/fdinfo/" + fd).read().split("flags:")[1].split()[0]
    except OSError:
        continue
    sockets += 1
    if not int(flags, 8) & 0o2000000: inherited.append(fd)
print(sockets, inherited)
s.close()
]]))
    assert.are.equal(0, rc, out)
    local sockets, inherited = out:match("^(%d+) (%b[])")
    assert.is_true(tonumber(sockets) >= 2, out)   -- the listener and the lingering one
    assert.are.equal("[]", inherited)
  end)

  it("holds no write transaction while idle: another process runs a workflow on its database", function()
    local dir, db = workspace()
    start(dir, db)                  -- loading its workflows records their breakers, committed
    local rc, out = sh(MEND .. " run " .. q(dir .. "/hello.lua") .. " --db " .. q(db) ..
                       " --input " .. q('{"to":"c"}') .. " --json")
    assert.are.equal(0, rc, out)
    assert.are.equal("succeeded", json.decode(out:match("(%b{})%s*$")).status)
  end)

  it("goes on serving and storing after requests naming runs, keys and workflows that are not UTF-8", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local _, first = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "a" } })
    for _, path in ipairs { "/api/v1/runs/%C3%28", "/api/v1/runs/%C3%28/history",
                            "/api/v1/runs/%C3%28/events", "/api/v1/workflows/%FF",
                            "/api/v1/runs?workflow=%FF", "/api/v1/runs?cursor=1~%C3%28" } do
      local code, e = get(base, path)
      assert.are_not.equal(503, code, path)                 -- never the database's failure
      assert.are_not.equal("storage", e and e.error and e.error.code, path)
    end
    for _, path in ipairs { "/api/v1/runs/%C3%28/cancel", "/api/v1/dlq/%C3%28/retry",
                            "/api/v1/breakers/%FF/open", "/api/v1/runs/%C3%28/events" } do
      local code = post(base, path, { name = "paid", note = "n" })
      assert.are_not.equal(503, code, path)
    end
    -- what it names goes back in the message, its bytes that are not text as '?'
    local code, e = get(base, "/api/v1/runs/%C3%28")
    assert.are.equal(404, code)
    assert.are.equal("not_found", e.error.code)
    assert.is_truthy(e.error.message:find("?(", 1, true), e.error.message)
    local code, second = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "b" } })
    assert.are.equal(201, code)
    local _, page = get(base, "/api/v1/runs")
    assert.are.equal(2, #page.runs)
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM runs WHERE id IN ('" .. first.id ..
                                       "', '" .. second.id .. "')"))
  end)

  it("closes connections past 256 at once, and goes on serving", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local port = base:match(":(%d+)$")
    -- python3 holds 300 connections open and counts those the server closed.
    local rc, out = sh("python3 -c " .. q([[
import socket, sys, time
socks = [socket.create_connection(("127.0.0.1", ]] .. port .. [[)) for _ in range(300)]
for s in socks:
    s.setblocking(False)
gone, deadline = set(), time.time() + 10
while len(gone) < 44 and time.time() < deadline:
    time.sleep(0.1)
    for i, s in enumerate(socks):
        try:
            if s.recv(1) == b"":
                gone.add(i)
        except BlockingIOError:
            pass
time.sleep(0.3)
for i, s in enumerate(socks):
    try:
        if s.recv(1) == b"":
            gone.add(i)
    except BlockingIOError:
        pass
print("closed", len(gone))
]]))
    assert.are.equal(0, rc, out)
    assert.are.equal("44", out:match("closed (%d+)"))
    local code = get(base, "/api/v1")
    assert.are.equal(200, code)
  end)

  it("sends CORS headers only for the origin given with --cors", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0 --cors http://dash.example")
    local code, _, _, headers = get(base, "/api/v1/runs")
    assert.are.equal(200, code)
    assert.matches("access%-control%-allow%-origin: http://dash%.example", headers:lower())
    -- a history's next page is in its Link header, which the page's script must be let read
    assert.matches("access%-control%-expose%-headers: link", headers:lower())
    -- what a browser would never match (a path, a list, nothing), and a header's end, refused
    for _, bad in ipairs { "", "http://dash.example/", "http://a.example, http://b.example", "*",
                           "dash.example", "http://dash.example\r\nX-Evil: 1" } do
      local rc, out = sh("timeout 10 " .. MEND .. " serve --db " .. q(dir .. "/none.db") ..
                         " --listen 127.0.0.1:0 --cors " .. q(bad))
      assert.are.equal(2, rc, bad)
      assert.matches("%-%-cors takes one origin", out)
    end
    assert.is_nil(io.open(dir .. "/none.db"))
    local rc, out = sh("timeout 10 " .. MEND .. " serve --db " .. q(dir .. "/none.db") ..
                       " --listen 127.0.0.1:0 --cors " .. q("http://" .. ("a"):rep(250) .. "/"))
    assert.are.equal(2, rc, out)
    assert.matches('got "http://a+"%.%.%.', out)   -- cut, and said so: not a control character
    assert.is_nil(out:find("control character"), out)
    -- a host's own listen (mend.serve in the mend program's Lua) is held to it as the flag is
    local script = H.write_file(dir, "cors.lua", table.concat({
      "eng = require('mend').engine{}",
      "print('got', require('mend.serve').listen(eng, { address = '127.0.0.1:0', cors = " ..
        "'http://dash.example\\r\\nX-Evil: 1' }))",
      "print('check', require('mend.serve').check{ cors = 'http://dash.example:8080' })",
      "eng:close()",
    }, "\n") .. "\n")
    rc, out = sh(("timeout 20 %s repl < %s"):format(MEND, q(script)))
    assert.are.equal(0, rc, out)
    assert.matches("\ngot\tnil\t%-%-cors takes one origin[^\n]*\tcors\n", "\n" .. out)
    assert.matches("\ncheck\ttrue\n", "\n" .. out)
  end)

  it("needs the token for every change when one is set, and for everything beyond loopback", function()
    local dir, db = workspace()
    local token = "s3cret-token-0123456789"
    local tokfile = H.write_file(dir, "token", token .. "\n")
    local base = start(dir, db, "--listen 127.0.0.1:0 --token-file " .. q(tokfile))
    local code, e, _, headers = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    assert.are.equal(401, code)
    assert.are.equal("unauthorized", e.error.code)
    assert.matches("www%-authenticate: bearer", headers:lower())
    code = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } }, { token = "wrong-token-000000000" })
    assert.are.equal(401, code)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs"))
    local r
    code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } }, { token = token })
    assert.are.equal(201, code)
    code = get(base, "/api/v1/runs")                           -- reads on loopback: open
    assert.are.equal(200, code)
    code = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil, { token = token })
    assert.are.equal(202, code)
    H.wait_for("the cancel", function() return status_of(base, r.id) == "failed" end, 10)
    assert.matches("%(mend serve, token%)$", operator_details(base, r.id)[1])
  end)

  -- A page of any site whose name the attacker's DNS points at 127.0.0.1 once it has loaded
  -- (DNS rebinding) speaks to loopback as its own origin: JSON, no preflight. What tells its
  -- requests apart is the name they are addressed to.
  it("takes a request addressed to a name other than loopback's as one from beyond it", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local port = base:match(":(%d+)$")
    local start_body = { workflow = "hello", input = { to = "x" } }
    for _, host in ipairs { "rebind.example:" .. port, "rebind.example", "127.0.0.1.nip.io:" .. port,
                            "localhost.evil.example", "[::ffff:7f00:1]:" .. port } do
      local code, e = post(base, "/api/v1/runs", start_body, { headers = { "Host: " .. host } })
      assert.are.equal(400, code, host)
      assert.are.equal("bad_header", e.error.code, host)
      assert.matches("Host", e.error.message)
      code, e = get(base, "/api/v1/runs", { headers = { "Host: " .. host } })
      assert.are.equal(400, code, host)
    end
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs"))
    for _, host in ipairs { "127.0.0.1:" .. port, "localhost:" .. port, "LocalHost", "127.1.2.3",
                            "[::1]:" .. port } do
      local code = post(base, "/api/v1/runs", start_body, { headers = { "Host: " .. host } })
      assert.are.equal(201, code, host)
    end
    -- With a token, such a request is one from beyond loopback: the token lets it in.
    local token = "rebind-token-0123456789"
    local tokfile = H.write_file(dir, "token", token)
    base = start(dir, db, "--listen 127.0.0.1:0 --token-file " .. q(tokfile))
    local host = { "Host: mend.internal.example" }
    local code = get(base, "/api/v1/runs", { headers = host })
    assert.are.equal(401, code)
    code = get(base, "/api/v1/runs", { headers = host, token = token })
    assert.are.equal(200, code)
    code = post(base, "/api/v1/runs", start_body, { headers = host, token = token })
    assert.are.equal(201, code)
    assert.are.same({ "6" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  it("refuses to listen beyond loopback without a token file; with one, every request needs it", function()
    local dir, db = workspace()
    local rc, out = sh(MEND .. " serve --db " .. q(dir .. "/none.db") .. " --listen 0.0.0.0:0")
    assert.are.equal(2, rc)   -- a usage error: the flags alone say it cannot be served
    assert.matches("0%.0%.0%.0:0 is not a loopback address: serving it needs %-%-token%-file", out)
    assert.matches("usage: mend serve", out)
    local short = H.write_file(dir, "short", "abc")
    rc, out = sh(MEND .. " serve --db " .. q(db) .. " --listen 0.0.0.0:0 --token-file " .. q(short))
    assert.are.equal(1, rc)
    assert.matches("at least 16 characters", out)
    rc, out = sh(MEND .. " serve --db " .. q(dir .. "/none.db") .. " --max-body lots")
    assert.are.equal(2, rc)
    assert.matches("%-%-max%-body must be a whole number of bytes", out)
    assert.is_nil(io.open(dir .. "/none.db"))                  -- refused before opening anything
    local token = "another-token-0123456789"
    local tokfile = H.write_file(dir, "token", token)
    -- Bound to every address for a moment; only loopback is ever spoken to.
    local base = start(dir, db, "--listen 0.0.0.0:0 --token-file " .. q(tokfile))
    base = base:gsub("0%.0%.0%.0", "127.0.0.1")
    local code = get(base, "/api/v1/runs")
    assert.are.equal(401, code)
    code = get(base, "/metrics")
    assert.are.equal(401, code)
    code = get(base, "/api/v1/runs", { token = token })
    assert.are.equal(200, code)
    -- The dashboard's page holds no data: it loads without the token, and asks for it.
    local _, _, page, headers = get(base, "/")
    assert.matches("<title>mend</title>", page)
    assert.matches("content%-security%-policy: default%-src 'none'", headers:lower())
  end)

  -- A malformed address is the command line's fault, known before anything is opened: a
  -- usage error (2), as any bad flag is. An address the system will not give is not: a
  -- runtime error (1) naming it.
  it("refuses a malformed --listen as a usage error, one it cannot bind as a failure", function()
    local dir, db = workspace()
    for _, command in ipairs{ "serve", "worker --workflows " .. q(dir) } do
      for _, bad in ipairs{ "nonsense", "127.0.0.1:notaport", "127.0.0.1:65536", "[::1]7070",
                            "example.com:80" } do
        local rc, out = sh(MEND .. " " .. command .. " --db " .. q(dir .. "/none.db") ..
                           " --listen " .. q(bad))
        assert.are.equal(2, rc, bad .. ": " .. out)
        assert.matches("%-%-listen " .. bad:gsub("%p", "%%%0"), out)
        assert.matches("usage: mend " .. command:match("%a+"), out)
        assert.is_nil(io.open(dir .. "/none.db"))   -- refused before opening anything
      end
    end
    local base = start(dir, db)
    local taken = base:match("^http://(.*)$")
    for _, command in ipairs{ "serve", "worker --workflows " .. q(dir) } do
      local rc, out = sh(MEND .. " " .. command .. " --db " .. q(db) .. " --listen " .. taken)
      assert.are.equal(1, rc, out)
      assert.matches("%-%-listen " .. taken:gsub("%p", "%%%0") .. ": address already in use", out)
      assert.not_matches("usage:", out)
    end
  end)

  it("serves Prometheus metrics that match the database", function()
    local dir, db = workspace()
    dead_letter(dir, db)
    local base = start(dir, db)
    post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    post(base, "/api/v1/breakers/psp/open", { seconds = 60 })
    local code, _, text, headers = get(base, "/metrics")
    assert.are.equal(200, code)
    assert.matches("content%-type: text/plain; version=0%.0%.4", headers:lower())
    local samples = {}
    for line in text:gmatch("[^\n]+") do
      if not line:match("^#") then
        local name, value = line:match("^(%S+) (%S+)$")
        assert(name, "not a sample line: " .. line)
        samples[name] = tonumber(value)
      else
        assert(line:match("^# HELP %S+ .+") or line:match("^# TYPE %S+ %a+$"), line)
      end
    end
    assert.are.equal(1, samples.mend_dlq_size)
    assert.is_nil(samples.mend_runs_parked)
    assert.are.equal(1, samples['mend_runs{workflow="refund",status="needs_attention"}'])
    assert.are.equal(1, samples['mend_runs{workflow="hello",status="running"}'])
    assert.are.equal(1, samples['mend_runs_by_status{status="running"}'])
    assert.are.equal(0, samples['mend_runs_by_status{status="succeeded"}'])
    assert.are.equal(2, samples['mend_breaker_state{key="psp"}'])
    assert.is_true(samples.mend_oldest_unfinished_run_age_seconds >= 0)
  end)
end)

describe("mend worker --listen", function()
  after_each(function()
    stop_all()
    H.cleanup()
  end)

  it("executes the runs started through its API, in the same process", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0", "worker")
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "world" } })
    assert.are.equal(201, code)
    H.wait_for("the run", function() return status_of(base, r.id) == "succeeded" end, 10)
    local _, run = get(base, "/api/v1/runs/" .. r.id)
    assert.are.same({ said = "hello world" }, run.steps[1].result)
    local _, history = get(base, "/api/v1/runs/" .. r.id .. "/history")
    assert.are.equal("succeeded", history[#history].to)
  end)

  it("gives an event sent through the API to the step waiting for it", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0", "worker")
    local _, r = post(base, "/api/v1/runs", { workflow = "wait", input = {}, key = "order-9" })
    H.wait_for("the wait", function()
      local _, run = get(base, "/api/v1/runs/" .. r.id)
      return run.steps[1].status == "waiting"
    end, 10)
    local code = post(base, "/api/v1/events", { run_key = "order-9", name = "payment", data = { amount = 12 } })
    assert.are.equal(202, code)
    H.wait_for("the run", function() return status_of(base, r.id) == "succeeded" end, 10)
    local _, run = get(base, "/api/v1/runs/" .. r.id)
    assert.are.same({ amount = 12 }, run.steps[1].result)
    assert.are.same({ amount = 12 }, run.steps[2].result)
  end)

  it("shows a run's children and its holder, as mend status --json does, and a child its parent",
     function()
    local dir, db = workspace()
    H.write_file(dir, "parent.lua", [[
      return { name = "parent", steps = { { name = "ship", child = "wait" } } }]])
    local base = start(dir, db, "--listen 127.0.0.1:0", "worker")
    local _, r = post(base, "/api/v1/runs", { workflow = "parent", input = {} })
    local run
    H.wait_for("the child", function()
      _, run = get(base, "/api/v1/runs/" .. r.id)
      return run.children ~= nil
    end, 10)
    assert.are.equal(1, #run.children)
    local kid = run.children[1]
    assert.are.same({ "ship", "wait", "running" }, { kid.step, kid.workflow, kid.status })
    local _, child = get(base, "/api/v1/runs/" .. kid.run_id .. "?wait=0")
    assert.are.same({ r.id, "ship", "timeout" }, { child.parent_run, child.parent_step, child.wait })
    local rc, out = sh(MEND .. " status " .. r.id .. " --db " .. q(db) .. " --json")
    assert.are.equal(0, rc, out)
    assert.are.same(json.decode(out).children, run.children)
    -- the worker holds both runs: held_by, as mend status --json reads it from another process
    assert.matches(":", run.held_by)
    assert.are.equal(json.decode(out).held_by, run.held_by)
    assert.are.equal(run.held_by, child.held_by)
  end)

  it("asks the worker holding a run to cancel it", function()
    local dir, db = workspace()
    local base = start(dir, db, "--listen 127.0.0.1:0", "worker")
    local _, r = post(base, "/api/v1/runs", { workflow = "wait", input = {} })
    H.wait_for("the wait", function()
      local _, run = get(base, "/api/v1/runs/" .. r.id)
      return run.steps[1].status == "waiting"
    end, 10)
    local code, c = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil, { who = "erin" })
    assert.are.equal(202, code)
    assert.are.equal("cancelling", c.cancel)                 -- held here: cancelled at once
    H.wait_for("the cancel", function() return status_of(base, r.id) == "failed" end, 10)
    assert.matches("^cancel by erin via http", operator_details(base, r.id)[1])
    -- the history names the process that did it: this worker, not a mend serve
    assert.matches("%(mend worker%)$", operator_details(base, r.id)[1])
  end)

  it("asks another process's worker to cancel: the run's error names who asked", function()
    local dir, db = workspace()
    local worker = start(dir, db, "--listen 127.0.0.1:0 --poll 0.02", "worker")
    local base = start(dir, db)
    local _, r = post(worker, "/api/v1/runs", { workflow = "wait", input = {} })
    H.wait_for("the wait", function()
      local _, run = get(base, "/api/v1/runs/" .. r.id)
      return run.steps[1].status == "waiting"
    end, 10)
    local code = post(base, "/api/v1/runs/" .. r.id .. "/cancel", nil, { who = "erin" })
    assert.are.equal(202, code)
    H.wait_for("the cancel", function() return status_of(base, r.id) == "failed" end, 10)
    local details = operator_details(base, r.id)
    local who = details[1]:match("^cancel requested by (erin via http .+%(mend serve%))$")
    assert.is_truthy(who, details[1])
    assert.are.equal("cancel by " .. who, details[2])
    local _, run = get(base, "/api/v1/runs/" .. r.id)
    assert.are.equal("cancelled by " .. who, run.error)
  end)
end)
