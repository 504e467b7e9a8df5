-- Completion tokens (wait = "token", issue 18): a step's execute hands ctx:token() to the
-- outside world and the step waits until the token is completed or failed; tokens are single
-- use and tied to their attempt; a timeout is a typed failure the step's policy handles. First
-- through the Lua API on the virtual clock, then with real `mend worker` processes and the
-- `mend complete` / `mend fail` commands.
local H = require "spec.helper"
local json = require("mend").json

local MEND = H.MEND
local q = H.quote

-- A refund that asks a person: the token of each attempt goes to `sent`.
local function refund(extra)
  local sent, undone = {}, {}
  local ask = { name = "approve", wait = "token", timeout = 48 * 3600,
    execute = function(ctx)
      local t = ctx:token()
      assert(ctx:token() == t, "one token an attempt")
      sent[#sent + 1] = t
      return "asked"
    end }
  for k, v in pairs(extra or {}) do ask[k] = v end
  local def = { name = "refund", steps = {
    { name = "hold", execute = function() return { held = 10 } end,
      compensate = function(_, r) undone[#undone + 1] = r.held end },
    ask,
    { name = "pay", execute = function(ctx) return { paid = ctx.results.approve } end },
  } }
  return def, sent, undone
end

local function step(eng, id, name) return H.step(eng:status(id), name) end

local function refused(fn, pattern)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.matches(pattern, tostring(err))
end

describe("a step with wait = \"token\"", function()
  after_each(H.cleanup)

  it("waits after execute for its token; complete gives the step its result", function()
    local eng, db = H.new_engine()
    local def, sent = refund()
    eng:register(def)
    local t0 = eng:now()
    local id = eng:start("refund", {})
    eng:advance(60)
    local s = step(eng, id, "approve")
    assert.are.equal("waiting", s.status)
    assert.are.equal("token", s.awaits)
    assert.is_true(math.abs(s.due - (t0 + 48 * 3600)) < 1)
    assert.are.equal(1, #sent)
    assert.matches("^mtk_%x+$", sent[1])
    assert.is_true(#sent[1] >= 4 + 32, "at least 128 bits")
    assert.are.equal(id, eng:complete(sent[1], { ok = "by alice" }))
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.are.same({ ok = "by alice" }, H.step(st, "approve").result)
    assert.are.same({ paid = { ok = "by alice" } }, H.step(st, "pay").result)
    assert.are.same({ "pending->running", "running->waiting", "waiting->succeeded" },
                    H.transitions(eng, id, "approve"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM tokens WHERE used IS NOT NULL"))
    -- single use
    refused(function() eng:complete(sent[1], "again") end, "was used already: a token is single use")
    refused(function() eng:fail(sent[1], { kind = "fatal" }) end, "was used already")
    refused(function() eng:complete("mtk_nosuch") end, "no token mtk_nosuch")
  end)

  it("fails with each kind: fatal and compensable compensate, retryable makes a new attempt",
     function()
    for _, kind in ipairs { "fatal", "compensable" } do
      local eng = H.new_engine()
      local def, sent, undone = refund()
      eng:register(def)
      local id = eng:start("refund", {})
      eng:advance(1)
      eng:fail(sent[1], { kind = kind, message = "rejected by bob" })
      eng:run()
      local st = eng:status(id)
      assert.are.equal("compensated", st.status, kind)
      assert.are.equal(kind, st.reason)
      assert.matches("^" .. kind .. ": rejected by bob", H.step(st, "approve").error)
      assert.are.same({ 10 }, undone)
    end
    local eng = H.new_engine()
    local def, sent = refund{ retry = { max_attempts = 2, initial = 5, jitter = 0 } }
    eng:register(def)
    local id = eng:start("refund", {})
    eng:advance(1)
    eng:fail(sent[1], { kind = "retryable", message = "ask again" })
    eng:advance(1)
    assert.are.equal("retry_wait", step(eng, id, "approve").status)
    eng:advance(5)
    assert.are.equal("waiting", step(eng, id, "approve").status)
    assert.are.equal(2, #sent)
    assert.are_not.equal(sent[1], sent[2])
    -- the token of the first attempt is refused now; the second's completes
    refused(function() eng:complete(sent[1], "late") end, "was used already")
    eng:complete(sent[2], "yes")
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("yes", step(eng, id, "pay").result.paid)
    refused(function() eng:fail(sent[1], { kind = "bogus" }) end,
            "must be retryable, fatal or compensable, got bogus")
  end)

  it("refuses a token of an earlier attempt, one never used", function()
    local eng = H.new_engine()
    local def, sent = refund{ timeout = 100, retry = { max_attempts = 2, initial = 5, jitter = 0 } }
    eng:register(def)
    local id = eng:start("refund", {})
    eng:advance(101)   -- the first attempt's wait timed out
    assert.are.equal("retry_wait", step(eng, id, "approve").status)
    refused(function() eng:complete(sent[1], "too late") end,
            "attempt 1 of step approve is over %(retry_wait%): its token is refused")
    eng:advance(6)
    assert.are.equal(2, #sent)
    refused(function() eng:complete(sent[1], "too late") end,
            "the token is of attempt 1 of step approve, which is at attempt 2 now: a token of an"
            .. " earlier attempt is refused")
    eng:complete(sent[2], "in time")
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
  end)

  it("times out: a timeout failure, and the run compensates", function()
    local eng = H.new_engine()
    local def, sent, undone = refund{ retry = { max_attempts = 1 } }
    eng:register(def)
    local id = eng:start("refund", {})
    eng:advance(48 * 3600 - 1)
    assert.are.equal("waiting", step(eng, id, "approve").status)
    eng:advance(2)   -- two days on the virtual clock, at once
    local st = eng:status(id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.matches("^timeout: no completion of the token within 172800 s",
                   H.step(st, "approve").error)
    assert.are.same({ 10 }, undone)
    refused(function() eng:complete(sent[1], "late") end, "run %w+ is compensated: its tokens are of no use any more")
  end)

  it("waits across a restart: a completion sent while nobody holds the run", function()
    local eng, db = H.new_engine()
    local def, sent = refund()
    eng:register(def)
    local id = eng:start("refund", {})
    eng:advance(10)
    H.close(eng)
    local sender = H.reopen(db)
    assert.are.equal(id, sender:complete(sent[1], { by = "carol" }))
    H.close(sender)
    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.equal(1, eng2:recover())
    eng2:run()
    assert.are.equal("succeeded", eng2:status(id).status)
    assert.are.same({ by = "carol" }, step(eng2, id, "approve").result)
  end)

  it("upgrades a store that kept tokens as themselves: a waiting token completes, a used one"
     .. " stays used, and none is left in the store", function()
    local eng, db = H.new_engine()
    local def, sent = refund()
    eng:register(def)
    local waiting = eng:start("refund", {})
    local done = eng:start("refund", {})
    eng:advance(10)
    assert.are.equal(done, eng:complete(sent[2], { by = "dave" }))
    eng:advance(1)
    assert.are.equal("succeeded", eng:status(done).status)
    assert.are.equal("waiting", step(eng, waiting, "approve").status)
    H.close(eng)
    -- the store as mend wrote it before digests (SQLite schema 12, PostgreSQL schema 2): each
    -- token as itself, one an attempt, the completion's inbox row keyed by the token
    local pg = H.is_pg(db)
    for i, id in ipairs { waiting, done } do
      H.sql(db, ("UPDATE tokens SET digest = '%s' WHERE run_id = '%s'"):format(sent[i], id))
      H.sql(db, ("UPDATE inbox SET key = '%s' WHERE run_id = '%s' AND key IS NOT NULL")
        :format(sent[i], id))
    end
    H.sql(db, "ALTER TABLE tokens RENAME COLUMN digest TO token")
    H.sql(db, "DROP INDEX tokens_attempt")
    H.sql(db, "CREATE UNIQUE INDEX tokens_attempt ON tokens(run_id, step, attempt)")
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_kind")   -- nor a step's error kind then
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_severity")
    H.sql(db, "ALTER TABLE steps DROP COLUMN error_stopped")
    if not pg then H.sql(db, "DROP VIEW history_named") end   -- it names the column (made again)
    H.sql(db, "ALTER TABLE history DROP COLUMN error_kind")
    if pg then   -- and as it was before PostgreSQL's schema 4 (fewer index entries a step)
      H.sql(db, "DROP INDEX runs_key")
      H.sql(db, "ALTER TABLE runs ADD CONSTRAINT runs_run_key_key UNIQUE (run_key)")
      H.sql(db, "CREATE INDEX runs_owner ON runs(owner) WHERE owner IS NOT NULL")
      H.sql(db, "ALTER TABLE runs RESET (fillfactor)")
      H.sql(db, "ALTER TABLE steps RESET (fillfactor)")
    end
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 2 or 12))
    if not pg then   -- and without schema 20's inbox.who, which the migration adds again
      H.sql(db, "PRAGMA user_version = 12")
      H.sql(db, "ALTER TABLE inbox DROP COLUMN who")
    end
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM tokens WHERE token LIKE 'mtk_%'"))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key LIKE 'mtk_%'"))

    local eng2 = H.reopen(db)
    eng2:register(def)
    assert.are.same({ pg and "10" or "21" },
                    H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM tokens WHERE digest LIKE 'mtk_%'"))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox WHERE key LIKE 'mtk_%'"))
    assert.are.same({ "2" }, H.sql(db, "SELECT count(*) FROM tokens WHERE length(digest) = 64"))
    refused(function() eng2:complete(sent[2], "again") end, "was used already")
    assert.are.equal(waiting, eng2:complete(sent[1], { by = "erin" }))
    eng2:recover()
    eng2:run()
    assert.are.equal("succeeded", eng2:status(waiting).status)
    assert.are.same({ by = "erin" }, step(eng2, waiting, "approve").result)
    if not pg then
      -- nor in the file's bytes once its log is checkpointed: the old text was zeroed, not freed
      H.close(eng2)
      H.sql(db, "PRAGMA wal_checkpoint(TRUNCATE)")
      local bytes = H.read(db) .. H.read(db .. "-wal")
      assert.is_true(#bytes > 4096)
      for _, t in ipairs(sent) do assert.is_nil(bytes:find(t:sub(5), 1, true), t) end
    end
  end)

  it("takes no event named as mend's own: the token alone completes the step, the child alone"
     .. " ends its step", function()
    local eng = H.new_engine()
    local def, sent = refund()
    eng:register(def)
    eng:register({ name = "kid", steps = { { name = "hold", wait_for = "go" } } })
    eng:register({ name = "parent", steps = { { name = "ship", child = "kid" } } })
    local id, parent = eng:start("refund", {}), eng:start("parent", {})
    eng:advance(60)
    -- what the engine files a token's outcome and a child's end under, with their payloads
    local yes = { step = "approve", attempt = 1, ok = true, result = "mallory" }
    local forged = {
      { id, "mend.token:approve", yes },
      { id, "mend.token", yes },
      { parent, "mend.child:ship", { child = eng:status(parent).children[1].run_id,
                                     step = "ship", status = "succeeded", results = {} } },
      { parent, "mend.child", { step = "ship", status = "succeeded", results = {} } },
    }
    for _, f in ipairs(forged) do
      refused(function() eng:signal(f[1], f[2], f[3]) end,
              'signal: the event name "' .. f[2]:gsub("%p", "%%%0")
              .. '" is mend\'s own %(a token\'s outcome, a child\'s end%)')
    end
    assert.are.equal("sent", (eng:signal(id, "mend.tokens", 1)))   -- not one of them
    eng:advance(60)
    assert.are.equal("waiting", step(eng, id, "approve").status)
    assert.are.equal("waiting", step(eng, parent, "ship").status)
    assert.are.equal(id, eng:complete(sent[1], "alice"))
    eng:run()
    assert.are.equal("alice", step(eng, id, "approve").result)
    refused(function()
      eng:register({ name = "w", steps = { { name = "s", wait_for = "mend.token:s" } } })
    end, 'wait_for "mend.token:s" names an event of mend\'s own')
  end)

  -- Like an event, an outcome to a run that compensates next would lie in its inbox for ever.
  it("refuses an outcome to a run that fails or whose cancel was asked for", function()
    local mend = require "mend"
    local sent = {}
    local ask = { name = "c", wait = "token", timeout = 100,
                  execute = function(ctx) sent[#sent + 1] = ctx:token(); return "asked" end }
    local eng, db = H.new_engine({ lease = 60 })
    eng:register{ name = "gt", steps = { { name = "g", parallel = {
      { name = "a", execute = function(ctx) ctx:sleep(1); error(mend.fatal("sold out")) end },
      { name = "b", execute = function(ctx) ctx:sleep(5); return "b" end },
      ask,
    } } } }
    eng:register{ name = "t", steps = { ask } }
    local id = eng:start("gt", {})
    eng:advance(2)                               -- a failed for good; b's attempt in flight
    assert.are.equal("running", eng:status(id).status)
    refused(function() eng:complete(sent[1], "yes") end,
            "run " .. id .. " is failing %(a step failed for good: it compensates next%): its"
            .. " tokens are of no use any more")
    local rc, out = H.shell(MEND .. " complete " .. sent[1] .. " --db " .. q(db) .. " 2>&1")
    assert.are.equal(1, rc, out)
    assert.matches("is failing", out)
    local id2 = eng:start("t", {})
    eng:advance(1)
    local other = H.reopen(db)
    assert.are.equal("requested", other:cancel(id2, { who = "ops" }))
    for _, e in ipairs({ eng, other }) do   -- the engine holding it, one that does not
      refused(function() e:fail(sent[2], { kind = "fatal" }) end,
              "run " .. id2 .. " is being cancelled")
    end
    assert.are.same({}, H.sql(db, "SELECT name FROM inbox"))
  end)

  -- A branch whose attempt is still in flight when its group fails is let finish: an outcome
  -- its token got meanwhile is taken as it returns (saga.c, tokens.c), and a branch that
  -- succeeded is compensated with the group. Refused, the party that did the work is told
  -- "no use" and nothing undoes it.
  it("takes the outcome of a token whose attempt is in flight as its group fails", function()
    local mend = require "mend"
    local sent, undone = {}, {}
    local eng = H.new_engine({ lease = 60 })
    eng:register{ name = "gi", steps = { { name = "g", parallel = {
      { name = "a", execute = function(ctx) ctx:sleep(1); error(mend.fatal("sold out")) end },
      { name = "c", wait = "token", timeout = 100,
        execute = function(ctx) sent[#sent + 1] = ctx:token(); ctx:sleep(5); return "asked" end,
        compensate = function() undone[#undone + 1] = "c" end },
    } } } }
    local id = eng:start("gi", {})
    eng:advance(2)                               -- a failed for good; c's execute in flight
    assert.are.equal("running", eng:status(id).status)
    assert.are.equal(id, eng:complete(sent[1], "reserved"))
    eng:advance(10)
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.are.same({ "c" }, undone)
  end)

  it("refuses bad definitions and a step that asks no token", function()
    local eng = H.new_engine()
    refused(function() eng:register(H.one_step("a", { wait = "token" })) end,
            'wait = "token" needs execute')
    refused(function() eng:register(H.one_step("b", { wait = "event", execute = function() end })) end,
            'wait must be "token", got "event"')
    refused(function()
      eng:register(H.one_step("c", { wait = "token", wait_for = "x", execute = function() end }))
    end, "wait_for and execute cannot go together")
    eng:register(H.one_step("notoken", { wait = "token", execute = function() return 1 end }))
    local id = eng:start("notoken", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("failed", st.status)
    assert.matches("execute returned without asking for ctx:token%(%)", H.step(st, "work").error)
    eng:register(H.one_step("plain", { execute = function(ctx) return ctx:token() end }))
    id = eng:start("plain", {})
    eng:run()
    assert.matches('does not wait for a token %(declare wait = "token"%)',
                   step(eng, id, "work").error)
  end)
end)

describe("the REPL's complete() and fail()", function()
  after_each(H.cleanup)

  it("complete a token, refuse it again, and fail another", function()
    local dir = H.tmp_dir()
    local wf = H.write_file(dir, "tok.lua", [[
return { name = "tok", steps = {
  { name = "ask", wait = "token", retry = { max_attempts = 1 },
    execute = function(ctx) LAST_TOKEN = ctx:token() end },
  { name = "done", execute = function(ctx) return ctx.results.ask end } } }
]])
    local script = H.write_file(dir, "script.lua", table.concat({
      ("use %q"):format(wf), 'id = start("tok")', "advance(1)",
      'complete(LAST_TOKEN, { by = "alice" })', "complete(LAST_TOKEN)",
      'id2 = start("tok")', "advance(1)", 'fail(LAST_TOKEN, "fatal", "rejected")', "" }, "\n"))
    local rc, out = H.shell(("%s repl < %s"):format(MEND, q(script)))
    assert.are.equal(1, rc, out)   -- the refused complete() is an error of the script
    assert.matches("tok run %w+: succeeded", out)
    assert.matches("ask%s+token completed", out)
    assert.matches("complete: token of run %w+ step ask attempt 1 was used already", out)
    assert.matches("tok run %w+: failed\n  error: fatal: rejected", out)
  end)
end)

-- With real processes: mend start, mend worker, mend complete / fail, mend status.
local mend_cmd = H.mend_cmd

local worker = H.spawn_worker

local status_json = H.status_json

local function approve_step(db, id) return H.step(status_json(db, id), "approve") end

-- The tokens handed out, in order: the workflows log them, and the worker's log is where a
-- person reads them (the store keeps only their digests).
local function tokens_in(log)
  local seen, list = {}, {}
  for t in H.read(log):gmatch("mtk_%x+") do
    if not seen[t] then seen[t], list[#list + 1] = true, t end
  end
  return list
end

local function token_of(log)
  local list = tokens_in(log)
  return list[#list]
end

-- Everything the store holds, as text: a dump of the SQLite file, or of the PostgreSQL schema.
local function store_text(db)
  local cmd = "sqlite3 " .. q(db) .. " .dump"
  if H.is_pg(db) then
    cmd = "pg_dump --data-only --schema=" .. db:match("search_path%%3D([%w_]+)") .. " " .. q(H.PG)
  end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local text = p:read("a")
  assert(p:close(), text)
  return text
end

-- No token the run handed out can be read back from the store: not as itself, not in the
-- inbox, the history or a view.
local function stored_nowhere(db, tokens)
  local text = store_text(db)
  assert.is_true(#text > 1000, "the dump holds the store")
  for _, t in ipairs(tokens) do
    assert.is_nil(text:find(t, 1, true), "token " .. t .. " is in the store")
    assert.is_nil(text:find(t:sub(5), 1, true), "token " .. t .. " is in the store")
  end
end

describe("mend complete and mend fail with a real worker", function()
  after_each(H.cleanup)

  local function setup()
    local dir = H.tmp_dir()
    H.write_file(dir, "approval.lua", H.slurp("workflows/approval.lua"))
    return dir, H.new_db(dir, "a.db"), dir .. "/worker.log"
  end

  local function start(db, dir)
    local rc, out = mend_cmd(db, "start approval --workflows " .. q(dir)
      .. [[ --input '{"order":"o-1","amount":25}']])
    assert.are.equal(0, rc, out)
    return out:match("(%S+)")
  end

  it("completes a token; status shows the wait; a reused token is refused with exit 1", function()
    local dir, db, log = setup()
    local id = start(db, dir)
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return approve_step(db, id).status == "waiting" end, 10)
    local rc, out = mend_cmd(db, "status " .. id)
    assert.matches("approve waiting for a token, due ", out)
    local token = token_of(log)
    assert.is_string(token)
    rc, out = H.shell(("%s complete %s --result '{\"by\":\"alice\"}' --db %s"):format(MEND, token, q(db)))
    assert.are.equal(0, rc, out)
    assert.matches("token completed: run " .. id, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    assert.are.equal(0, rc, out .. H.read(log))
    assert.are.same({ by = "alice" }, approve_step(db, id).result)
    rc, out = mend_cmd(db, "complete " .. token)
    assert.are.equal(1, rc)
    assert.matches("was used already: a token is single use", out)
    rc, out = mend_cmd(db, "fail " .. token .. " --kind fatal")
    assert.are.equal(1, rc)
    assert.matches("was used already", out)
    rc, out = mend_cmd(db, "fail " .. token .. " --kind maybe")
    assert.are.equal(2, rc)
    rc, out = mend_cmd(db, "complete mtk_0000")
    assert.are.equal(1, rc)
    assert.matches("no token mtk_0000", out)
    H.stop_worker(pid)
    stored_nowhere(db, { token })
    -- the history keeps what the step logged, with the token masked
    rc, out = mend_cmd(db, "history " .. id)
    assert.matches("mend complete mtk_" .. ("%*"):rep(32), out)
    assert.is_nil(out:find(token, 1, true))
    rc, out = mend_cmd(db, "status " .. id .. " --json")
    assert.is_nil(out:find(token, 1, true))
  end)

  it("fails a token (a rejection): the refund compensates", function()
    local dir, db, log = setup()
    local id = start(db, dir)
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return approve_step(db, id).status == "waiting" end, 10)
    local rc, out = mend_cmd(db, "fail " .. token_of(log) .. " --kind fatal --message 'not eligible'")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.matches("fatal: not eligible", H.step(st, "approve").error)
    assert.are.equal("compensated", H.step(st, "open").status)
  end)

  it("refuses with exit 1 the token of an earlier attempt, once the next one waits", function()
    local dir, db, log = setup()
    -- the first attempt asks for its token, then fails: the second hands out its own
    H.write_file(dir, "ask.lua", [[
local mend = require "mend"
return { name = "ask", steps = {
  { name = "approve", wait = "token", timeout = 3600,
    retry = { max_attempts = 2, initial = 0.1, jitter = 0 },
    execute = function(ctx)
      ctx:log("token %s", ctx:token())
      if ctx.attempt == 1 then error(mend.retryable("mail server busy")) end
    end } } }
]])
    local rc, out = mend_cmd(db, "start ask --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the second attempt's wait", function()
      local s = approve_step(db, id)
      return s.status == "waiting" and s.attempts == 2
    end, 10)
    local tokens = tokens_in(log)
    assert.are.equal(2, #tokens)
    rc, out = mend_cmd(db, "complete " .. tokens[1])
    assert.are.equal(1, rc)
    assert.matches("the token is of attempt 1 of step approve, which is at attempt 2 now: a token"
                   .. " of an earlier attempt is refused", out)
    rc, out = mend_cmd(db, "complete " .. tokens[2] .. " --result 7")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    assert.are.equal(7, approve_step(db, id).result)
    stored_nowhere(db, tokens)
  end)

  it("refuses a token handed out before its worker was killed: the step's next attempt has its"
     .. " own", function()
    local dir, db, log = setup()
    -- the first execution asks for its token, then sleeps until its worker is killed; the
    -- next worker runs the step again as attempt 2, with a token of its own (the store has
    -- only the digest of the first, so could not hand it out again)
    local flag = dir .. "/first-run"
    H.write_file(dir, "again.lua", ([[
return { name = "again", steps = {
  { name = "approve", wait = "token", timeout = 3600,
    execute = function(ctx)
      ctx:log("token %%s", ctx:token())
      local f = io.open(%q)
      if f then f:close() return end
      io.open(%q, "w"):close()
      ctx:sleep(3600)
    end } } }
]]):format(flag, flag))
    local rc, out = mend_cmd(db, "start again --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the first execution", function()
      return #tokens_in(log) == 1 and H.read(flag) ~= nil and io.open(flag) ~= nil end, 10)
    os.execute("kill -KILL " .. pid)
    pid = worker(db, dir, log)
    H.wait_for("the second execution's wait", function()
      return approve_step(db, id).status == "waiting" end, 30)
    local tokens = tokens_in(log)
    assert.are.equal(2, #tokens)
    assert.are.equal(2, approve_step(db, id).attempts)
    rc, out = mend_cmd(db, "complete " .. tokens[1] .. " --result 1")
    assert.are.equal(1, rc, out)
    assert.matches("the token is of attempt 1 of step approve, which is at attempt 2 now", out)
    rc, out = mend_cmd(db, "complete " .. tokens[2] .. " --result 2")
    assert.are.equal(0, rc, out)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    assert.are.equal(2, approve_step(db, id).result)
    stored_nowhere(db, tokens)
  end)


  -- A deadline is the step's, not a worker's: that no worker ran when it passed (all killed,
  -- or stopped) does not stretch it for an answer that comes after it.
  -- (A timeout of 3 s: a sanitizer build's worker and mend status must see the wait first.)
  it("refuses a completion that comes after the wait's timeout, though no worker ran then", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "quick.lua", [[
      local undo = "]] .. dir .. [[/undone"
      return { name = "quick", steps = {
        { name = "hold", execute = function() return 1 end,
          compensate = function() local f = io.open(undo, "a"); f:write("hold\n"); f:close() end },
        { name = "approve", wait = "token", timeout = 3, retry = { max_attempts = 1 },
          execute = function(ctx) ctx:log("mend complete %s", ctx:token()) end },
      } }]])
    local db, log = H.new_db(dir, "q.db"), dir .. "/worker.log"
    local rc, out = mend_cmd(db, "start quick --workflows " .. q(dir))
    assert.are.equal(0, rc, out)
    local id = out:match("(%S+)")
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return approve_step(db, id).status == "waiting" end, 10)
    H.shell("kill -9 " .. pid)
    local due = approve_step(db, id).due
    while os.time() < due + 1 do H.shell("sleep 0.2") end
    local token = token_of(log)
    rc, out = mend_cmd(db, "complete " .. token .. [[ --result '"late"']])
    assert.are.equal(1, rc, out)
    assert.matches("timed out", out)
    pid = worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(3, rc, out .. H.read(log))
    local st = status_json(db, id)
    assert.are.equal("compensated", st.status)
    assert.are.equal("timeout", st.reason)
    assert.are.equal("hold\n", H.read(dir .. "/undone"))
  end)
  it("keeps a completion sent while no worker runs for the next worker", function()
    local dir, db, log = setup()
    local id = start(db, dir)
    local pid = worker(db, dir, log)
    H.wait_for("the wait", function() return approve_step(db, id).status == "waiting" end, 10)
    H.stop_worker(pid)
    local token = token_of(log)
    local rc, out = mend_cmd(db, "complete " .. token .. [[ --result '"ok"']])
    assert.are.equal(0, rc, out)
    assert.are.equal("waiting", approve_step(db, id).status)
    stored_nowhere(db, { token })   -- the completion waits in the inbox, keyed by its digest
    pid = worker(db, dir, log)
    rc, out = mend_cmd(db, "wait " .. id .. " --timeout 10")
    H.stop_worker(pid)
    assert.are.equal(0, rc, out .. H.read(log))
    assert.are.equal("ok", approve_step(db, id).result)
  end)
end)
