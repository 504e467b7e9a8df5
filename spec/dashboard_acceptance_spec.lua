-- The dashboard as a user meets it, from docs/http-api.md ("The dashboard") alone: headless
-- chromium (spec/support/browser.lua) on a real `mend serve`, with a worker carrying runs into
-- every state (succeeded, compensated, in the dead-letter queue, waiting for an event, waiting
-- to retry). The lists and a run's page must show each as the API has it, the status filter
-- and the runs' pages by the cursor must hold every run once, the dead letters must all be
-- listed (past the API's first page; newest first, 500 at a time), one resolved from the page
-- must end resolved, and text of the user's (a run key, a step name, an error, a breaker key,
-- a resolve note) holding HTML must be shown as that text and never run. (When things go
-- wrong: spec/dashboard_failures_spec.lua; answers it must not trust:
-- spec/dashboard_hostile_spec.lua.)
local H = require "spec.helper"
local mend = require "mend"
local B = require "spec.support.browser"

local q, json, http_json = H.quote, mend.json, B.http_json

-- Each hostile string sets window.__xss to its own name if the page ever runs it.
local function evil(name)
  return ([[<img src=x onerror="window.__xss='%s'"><script>window.__xss='%s'</script>]]):format(name, name)
end
local EVIL_STEP, EVIL_BREAKER, EVIL_ERROR = evil("step"), evil("breaker"), evil("error")
local EVIL_COMP, EVIL_KEY, EVIL_NOTE = evil("compensation"), evil("key"), evil("note")

local WORKFLOWS = {
  ["ok.lua"] = [[return { name = "ok", steps = { { name = "one", execute = function() return 1 end } } }]],
  ["comp.lua"] = [[
local mend = require "mend"
return { name = "comp", steps = {
  { name = "book", execute = function() return 1 end, compensate = function() end },
  { name = "pay", execute = function() error(mend.fatal("card declined")) end } } }]],
  ["dead.lua"] = [[
local mend = require "mend"
return { name = "dead", compensate_retry = { max_attempts = 1 }, steps = {
  { name = "refund", execute = function() return 1 end,
    compensate = function() error(mend.retryable("refund service down")) end },
  { name = "charge", execute = function() error(mend.fatal("card declined")) end } } }]],
  ["waits.lua"] = [[return { name = "waits", steps = { { name = "approve", wait_for = "approved" } } }]],
  ["retrying.lua"] = [[
local mend = require "mend"
return { name = "retrying", retry = { max_attempts = 5, initial = 3600, jitter = 0 }, steps = {
  { name = "call", execute = function() error(mend.retryable("upstream 503")) end } } }]],
  ["evil.lua"] = ([[
local mend = require "mend"
return { name = "evil", compensate_retry = { max_attempts = 1 }, steps = {
  { name = %q, breaker = { key = %q }, execute = function() return 1 end,
    compensate = function() error(mend.retryable(%q)) end },
  { name = "fail", execute = function() error(mend.fatal(%q)) end } } }]]):format(EVIL_STEP, EVIL_BREAKER, EVIL_COMP, EVIL_ERROR),
}

local NO_XSS = "return window.__xss === undefined ? 'none' : String(window.__xss)"

local function workspace() return B.workspace(WORKFLOWS) end

local function start(base, workflow, key)
  local run, raw = http_json("POST", base .. "/api/v1/runs", { workflow = workflow, input = {}, key = key })
  assert(run and run.id, "start " .. workflow .. ": " .. tostring(raw))
  return run.id
end

local function run_of(base, id) return http_json("GET", base .. "/api/v1/runs/" .. id) end

describe("the dashboard, as its docs say, in chromium", function()
  after_each(function() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)

  it("shows runs in every state, their pages and timelines, and hostile text as text", function()
    local dir, db = workspace()
    local base, session = B.serve_and_browse(dir, db)
    B.spawn(H.MEND .. " worker --db " .. q(db) .. " --workflows " .. q(dir) .. " --poll 0.05 2>>" .. q(dir .. "/worker.err"))
    local ids = {}
    for _, w in ipairs { "ok", "comp", "dead", "waits", "retrying" } do ids[w] = start(base, w) end
    ids.evil = start(base, "evil", EVIL_KEY)
    local want = { ok = "succeeded", comp = "compensated", dead = "needs_attention", evil = "needs_attention" }
    H.wait_for("every run in its state", function()
      for w, st in pairs(want) do
        if run_of(base, ids[w]).status ~= st then return false end
      end
      return run_of(base, ids.waits).steps[1].status == "waiting"
         and run_of(base, ids.retrying).steps[1].status == "retry_wait"
    end, 30)

    -- The list: every run once, with its status, and the key as text.
    session.go(base .. "/#/runs")
    local rows = session.wait("the runs", [[
      var trs = document.querySelectorAll('#runs-body tr[data-run]');
      if (trs.length < 6) return null;
      var out = {};
      trs.forEach(function (tr) { out[tr.dataset.run] = [tr.querySelector('.badge').textContent, tr.children[3].textContent]; });
      return out;]], 15)
    for w, id in pairs(ids) do
      assert.are.equal(run_of(base, id).status, rows[id][1], w)
    end
    assert.are.equal(EVIL_KEY, rows[ids.evil][2])
    -- The status filter lists those runs only.
    session.js("var s = document.querySelector('#f-status'); s.value = 'needs_attention'; s.dispatchEvent(new Event('change'));")
    local listed = session.wait("the filtered list", [[
      var trs = document.querySelectorAll('#runs-body tr[data-run]');
      return trs.length === 2 && Array.from(trs).map(function (tr) { return tr.dataset.run; }).sort();]], 10)
    local dead = { ids.dead, ids.evil }
    table.sort(dead)
    assert.are.same(dead, listed)

    -- A run waiting for an event: an open event-wait bar and Cancel; one waiting to retry: a
    -- failed attempt and an open retry wait.
    session.go(base .. "/#/run/" .. ids.waits)
    local waiting = session.wait("the waiting run's page", [[
      var b = document.querySelector('#timeline rect.bar-waiting');
      return b && [b.dataset.outcome, document.querySelector('#cancel') !== null, document.querySelector('h2 .badge').textContent];]], 15)
    assert.are.same({ "open", true, "running" }, waiting)
    session.go(base .. "/#/run/" .. ids.retrying)
    local retrying = session.wait("the retrying run's page", [[
      var w = document.querySelector('#timeline rect.bar-retry_wait'), a = document.querySelector('#timeline rect.bar-running');
      return w && a && [a.dataset.outcome, w.dataset.outcome, a.querySelector('title').textContent];]], 15)
    assert.are.equal("retry_wait", retrying[1])
    assert.are.equal("open", retrying[2])
    assert.matches("upstream 503", retrying[3])

    -- The hostile run's page: its step name, errors and key as text, none of them run.
    session.go(base .. "/#/run/" .. ids.evil)
    local shown = session.wait("the hostile run's page", [[
      var l = document.querySelector('#timeline .lane-label');
      return l && [l.textContent, document.querySelector('.kv').textContent, document.querySelector('#view').textContent];]], 15)
    assert.are.equal(EVIL_STEP, shown[1])
    assert.truthy(shown[2]:find(EVIL_KEY, 1, true), shown[2])
    assert.truthy(shown[3]:find(EVIL_ERROR, 1, true), "the error is not shown as text")
    assert.truthy(shown[3]:find(EVIL_COMP, 1, true), "the compensation's error is not shown as text")

    -- The dead letters: both listed with their errors as text; the hostile one resolved from
    -- the page with a hostile note, which its history then shows as text.
    session.go(base .. "/#/dlq")
    local letters = session.wait("the dead letters", [[
      var a = document.querySelector('tr[data-run="]] .. ids.dead .. [["]'), b = document.querySelector('tr[data-run="]] .. ids.evil .. [["]');
      return a && b && [a.querySelector('.err').textContent, b.textContent];]], 15)
    assert.matches("refund service down", letters[1])
    assert.truthy(letters[2]:find(EVIL_STEP, 1, true), letters[2])
    session.js("window.prompt = function () { return " .. json.encode(EVIL_NOTE) .. "; };" ..
               "document.querySelector('tr[data-run=\"" .. ids.evil .. "\"] button.resolve').click()")
    session.wait("the resolved row gone", "return document.querySelector('tr[data-run=\"" .. ids.evil .. "\"]') === null", 10)
    assert.are.equal("resolved", run_of(base, ids.evil).status)
    session.go(base .. "/#/run/" .. ids.evil)
    local history = session.wait("the resolved run's history", [[
      var b = document.querySelector('h2 .badge');
      return b && b.textContent === 'resolved' && document.querySelector('#view').textContent;]], 15)
    assert.truthy(history:find(EVIL_NOTE, 1, true), "the note is not shown as text")

    -- The breakers: the hostile key as text, and opened by its button (the key in the path).
    session.go(base .. "/#/breakers")
    local key = session.wait("the breakers", [[
      var td = document.querySelector('tr[data-key] td.mono');
      return td && td.textContent;]], 15)
    assert.are.equal(EVIL_BREAKER, key)
    session.js("document.querySelector('tr[data-key] button[data-op=open]').click()")
    session.wait("the breaker open", "var b = document.querySelector('tr[data-key] .badge'); return b && b.textContent === 'open'", 10)

    -- Whatever the page drew, nothing of the data ran.
    os.execute("sleep 0.5")
    assert.are.equal("none", session.js(NO_XSS))
    assert.are.equal(0, session.js("return document.querySelectorAll('#view img, #view script').length"))
  end)

  it("pages through the runs by the cursor, each run once, and keeps the pages it showed", function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "real" })
    eng:load(dir .. "/ok.lua")
    local all = {}
    for i = 1, 120 do all[i] = eng:start("ok", { n = i }, { detached = true }) end
    H.close(eng)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/runs")
    local count = [[
      var n = document.querySelectorAll('#runs-body tr[data-run]').length, more = document.querySelector('#more');
      return n > 0 && [n, more.style.display !== 'none'];]]
    assert.are.same({ 50, true }, session.wait("the first page", count, 15))
    session.js("document.querySelector('#more').click()")
    session.wait("the second page", "return document.querySelectorAll('#runs-body tr[data-run]').length === 100", 10)
    session.js("document.querySelector('#more').click()")
    session.wait("the last page", "return document.querySelectorAll('#runs-body tr[data-run]').length === 120", 10)
    assert.is_false(session.js(count)[2])   -- no more button on the last page
    -- The live refresh (every 2 s) does not take the pages away: one is drawn after them.
    local drawings = "return +(document.body.dataset.drawings || 0)"
    local drawn = session.js(drawings)
    session.wait("a refresh after the last page", drawings .. " > " .. drawn, 10)
    local ids = session.js("return Array.from(document.querySelectorAll('#runs-body tr[data-run]')).map(function (tr) { return tr.dataset.run; })")
    assert.are.equal(120, #ids)
    local seen = {}
    for _, id in ipairs(ids) do
      assert.is_nil(seen[id], "listed twice: " .. id)
      seen[id] = true
    end
    for _, id in ipairs(all) do assert.is_true(seen[id], "not listed: " .. id) end
    local api = http_json("GET", base .. "/api/v1/runs?limit=120")
    for i, r in ipairs(api.runs) do assert.are.equal(r.id, ids[i], "row " .. i) end   -- newest first, as the API
  end)

  it("lists every dead letter, past the API's first page of 1000", function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "virtual" })   -- the schema, made by mend
    H.close(eng)
    local values = {}
    for i = 1, 1005 do
      values[i] = ("('d%04d', 'compensation_failed', 's', 'e%d', NULL, %d)"):format(i, i, 1000 + i)
    end
    H.sql(db, "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES " .. table.concat(values, ", "))
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/dlq")
    local count = session.wait("the dead letters", "var c = document.querySelector('#dlq-count'); return c && c.textContent;", 15)
    assert.are.equal("1005", count)
    -- the newest first (the API's last page, which its first leaves out), 500 at a time
    assert.are.equal("d1005", session.js("return document.querySelector('tr[data-run]').dataset.run"))
    for _ = 1, 2 do session.js("document.querySelector('#dlq-more').click()") end
    local ids = session.js("return Array.from(document.querySelectorAll('tr[data-run]')).map(function (tr) { return tr.dataset.run; })")
    assert.are.equal(1005, #ids)
    for i, id in ipairs(ids) do assert.are.equal(("d%04d"):format(1006 - i), id) end
    assert.are.equal("none", session.js("return document.querySelector('#dlq-more').style.display"))
  end)

  it("draws the lanes of steps named __proto__, constructor, toString as any other", function()
    local dir, db = workspace()
    H.write_file(dir, "proto.lua", [[
return { name = "proto", steps = { { name = "first", execute = function() return 1 end },
  { name = "constructor", execute = function() return 1 end },
  { name = "toString", execute = function() return 1 end },
  { name = "hasOwnProperty", execute = function() return 1 end },
  { name = "__proto__", wait_for = "go" } } }]])
    local base, session = B.serve_and_browse(dir, db)
    B.spawn(H.MEND .. " worker --db " .. q(db) .. " --workflows " .. q(dir) .. " --poll 0.05 2>>" .. q(dir .. "/worker.err"))
    local id = start(base, "proto")
    H.wait_for("the wait", function() return run_of(base, id).steps[5].status == "waiting" end, 20)
    session.go(base .. "/#/run/" .. id)
    local bars = session.wait("the timeline", [[
      var bars = document.querySelectorAll('#timeline rect.bar');
      return bars.length > 0 && Array.from(bars).map(function (b) { return b.dataset.step + '/' + b.getAttribute('class') + '/' + b.dataset.outcome; });]], 15)
    assert.are.same({ "first/bar bar-running/succeeded", "constructor/bar bar-running/succeeded",
                      "toString/bar bar-running/succeeded", "hasOwnProperty/bar bar-running/succeeded",
                      "__proto__/bar bar-waiting/open" }, bars)
    assert.are.same({ "first", "constructor", "toString", "hasOwnProperty", "__proto__" },
                    session.js("return Array.from(document.querySelectorAll('#timeline .lane-label')).map(function (l) { return l.textContent; })"))
  end)
end)
