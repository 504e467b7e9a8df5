-- The dashboard of `mend serve` in a real browser: Debian's chromium, driven through
-- chromedriver's WebDriver protocol (spoken with curl), against a server on a database with a
-- known run. The run's timeline must have the bars its history says (attempts, retry waits, a
-- breaker wait, a failed compensation); a click on Retry in the dead-letter list must carry the
-- run on to its end; Cancel, Resolve and a breaker's Open must do what they say, and a refusal
-- (no token, a dead letter already settled) must be shown. Screenshots go to build/artifacts
-- (MEND_ARTIFACT_DIR). The browser and the server: spec/support/browser.lua.
local H = require "spec.helper"
local mend = require "mend"
local B = require "spec.support.browser"

local MEND, q, sh = H.MEND, H.quote, H.shell
local json, http_json = mend.json, B.http_json

-- Two attempts fail, the breaker opens, the third fails after its wait, the fourth is
-- declined: reserve is compensated, and its compensation fails while the flag file exists.
local SAGA = [[
local mend = require "mend"
local calls = 0
return { name = "saga", retry = { max_attempts = 6, initial = 0.5, multiplier = 1, jitter = 0 },
  compensate_retry = { max_attempts = 2, initial = 0.1, jitter = 0 },
  steps = {
    { name = "reserve", execute = function() return "r" end,
      compensate = function(ctx)
        local f = io.open(ctx.input.flag)
        if f then f:close(); error(mend.retryable("stock service down")) end
      end },
    { name = "charge",
      breaker = { key = "psp", failure_threshold = 2, open_seconds = 3, success_threshold = 1,
                  half_open_max = 1 },
      execute = function()
        calls = calls + 1
        if calls <= 3 then error(mend.retryable("gateway timeout " .. calls)) end
        error(mend.fatal("card declined"))
      end },
  } }
]]

describe("the dashboard in chromium", function()
  after_each(function() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)

  it("draws a run's timeline and carries a dead letter on when Retry is clicked", function()
    assert(io.open(B.CHROMIUM) and io.open(B.CHROMEDRIVER),
           "chromium and chromium-driver are not installed (make deps installs them)")
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "dash.db")
    local wf = H.write_file(dir, "saga.lua", SAGA)
    local flag = H.write_file(dir, "stock-down", "")
    local rc, out = sh(MEND .. " run " .. q(wf) .. " --db " .. q(db) .. " --clock virtual --input " ..
                       q('{"flag":"' .. flag .. '"}') .. " --json 2>/dev/null")
    assert.are.equal(4, rc, out)
    local id = json.decode(out:match("(%b{})%s*$")).id
    -- A run of more history rows than the page draws: 1,800 attempts on the virtual clock, the
    -- last of which succeeds.
    local loop = H.write_file(dir, "loop.lua", [[
local mend = require "mend"
return { name = "loop", steps = {
  { name = "try", retry = { max_attempts = 1800, initial = 0.001, max_delay = 0.001, jitter = 0 },
    execute = function(ctx)
      if ctx.attempt < 1800 then error(mend.retryable("not yet")) end
      return "done"
    end } } }
]])
    rc, out = sh(MEND .. " run " .. q(loop) .. " --db " .. q(db) .. " --clock virtual --json 2>/dev/null")
    assert.are.equal(0, rc, out)
    local long_id = json.decode(out:match("(%b{})%s*$")).id

    local base, session = B.serve_and_browse(dir, db)

    -- What the history says the timeline must show.
    local history = http_json("GET", base .. "/api/v1/runs/" .. id .. "/history")
    local attempts, retry_waits, breaker_waits = 0, 0, 0
    for _, h in ipairs(history) do
      if h.event == "step" and h.step == "charge" then
        if h.to == "running" then attempts = attempts + 1 end
        if h.to == "retry_wait" then retry_waits = retry_waits + 1 end
        if h.to == "breaker_open" then breaker_waits = breaker_waits + 1 end
      end
    end
    assert.are.equal(4, attempts)
    assert.is_true(breaker_waits >= 1)

    session.go(base .. "/#/run/" .. id)
    session.wait("the timeline", "return document.querySelectorAll('#timeline rect.bar').length > 0", 15)
    local bars = session.js([[
      return Array.from(document.querySelectorAll('#timeline rect.bar')).map(function (r) {
        return { step: r.dataset.step, kind: r.getAttribute('class').replace('bar bar-', ''),
                 outcome: r.dataset.outcome, tip: r.querySelector('title').textContent };
      });]])
    local count = {}
    for _, b in ipairs(bars) do
      local k = b.step .. "/" .. b.kind
      count[k] = (count[k] or 0) + 1
    end
    assert.are.equal(attempts, count["charge/running"])
    assert.are.equal(retry_waits, count["charge/retry_wait"])
    assert.are.equal(breaker_waits, count["charge/breaker_open"])
    assert.are.equal(1, count["reserve/running"])
    assert.is_true((count["reserve/compensating"] or 0) >= 1)
    local last_comp, fatal
    for _, b in ipairs(bars) do
      if b.step == "reserve" and b.kind == "compensating" then last_comp = b end
      if b.step == "charge" and b.kind == "running" and b.outcome == "failed" then fatal = b end
    end
    assert.are.equal("compensation_failed", last_comp.outcome)
    assert.matches("stock service down", last_comp.tip)        -- the error on hover
    assert.matches("card declined", fatal.tip)
    assert.matches("needs_attention", session.js("return document.querySelector('h2 .badge').textContent"))
    session.screenshot("dashboard-run-timeline")

    -- The dead letter, retried from its list once the stock service is back.
    os.remove(flag)
    session.go(base .. "/#/dlq")
    session.wait("the dead letter", "return document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry') !== null", 15)
    session.screenshot("dashboard-dead-letters")
    session.js("document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry').click()")
    session.wait("the run page after the retry", "var b = document.querySelector('h2 .badge');" ..
                 " return b && b.textContent === 'compensated'", 20)
    local run = http_json("GET", base .. "/api/v1/runs/" .. id)
    assert.are.equal("compensated", run.status)
    local dlq = http_json("GET", base .. "/api/v1/dlq")
    assert.are.equal(0, #dlq)
    session.screenshot("dashboard-run-after-retry")

    -- A long run's page: its first rows drawn, its last listed, and notes saying so.
    local tail = http_json("GET", base .. "/api/v1/runs/" .. long_id .. "/history?tail=1")
    local rows = tail[1].seq
    assert.is_true(rows > 5000, rows)
    session.go(base .. "/#/run/" .. long_id)
    session.wait("the long run's notes", "return document.querySelector('#history-note') !== null", 20)
    assert.matches("the first 5000 of " .. rows .. " history rows are drawn",
                   session.js("return document.querySelector('#timeline-note').textContent"))
    assert.matches("the last 500 of " .. rows .. " rows",
                   session.js("return document.querySelector('#history-note').textContent"))
    local listed = session.js([[
      var trs = document.querySelectorAll('#history-note + table tbody tr');
      return [trs.length, trs[trs.length - 1].textContent];]])
    assert.are.equal(500, listed[1])
    assert.matches(tail[1].event, listed[2])
    session.screenshot("dashboard-long-run")
  end)

  it("cancels a run, resolves a dead letter and opens a breaker when clicked, and shows the server's refusals", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "buttons.db")
    H.write_file(dir, "hold.lua", [[
return { name = "hold", steps = {
  { name = "book", breaker = { key = "agency" }, execute = function() return "b" end,
    compensate = function() end },
  { name = "wait", sleep = 3600 } } }
]])
    local dead = H.write_file(dir, "dead.lua", [[
local mend = require "mend"
return { name = "dead", compensate_retry = { max_attempts = 1 }, steps = {
  { name = "refund", execute = function() return 1 end,
    compensate = function() error(mend.retryable("refund service down")) end },
  { name = "charge", execute = function() error(mend.fatal("card declined")) end } } }
]])
    local dead_ids = {}
    for i = 1, 2 do
      local rc, out = sh(MEND .. " run " .. q(dead) .. " --db " .. q(db) .. " --clock virtual --json 2>/dev/null")
      assert.are.equal(4, rc, out)
      dead_ids[i] = json.decode(out:match("(%b{})%s*$")).id
    end
    local token = "dashboard-token-0123456789"
    local token_file = H.write_file(dir, "token", token .. "\n")
    local base, session = B.serve_and_browse(dir, db, "--token-file " .. q(token_file))
    local out = os.tmpname()
    assert.are.equal(0, sh("curl -s -o " .. q(out) .. " -H 'Content-Type: application/json' -H " ..
                           q("Authorization: Bearer " .. token) .. " -d '{\"workflow\":\"hold\"}' " ..
                           q(base .. "/api/v1/runs")))
    local id = json.decode(H.read(out)).id
    os.remove(out)
    B.spawn(MEND .. " worker --db " .. q(db) .. " --workflows " .. q(dir) .. " --poll 0.05 2>/dev/null")
    H.wait_for("the run's sleep", function()
      local run = http_json("GET", base .. "/api/v1/runs/" .. id)
      return run and run.steps[2].status == "sleeping"
    end, 15)
    local toast = "var t = document.querySelector('#toast'); return t.style.display === 'block' && [t.className, t.textContent];"

    -- Without the token a read works, a change is refused and the page says why.
    session.go(base .. "/#/run/" .. id)
    session.wait("the Cancel button", "return document.querySelector('#cancel') !== null", 15)
    session.js("document.querySelector('#cancel').click()")
    local shown = session.wait("the refusal", toast, 10)
    assert.are.equal("bad", shown[1])
    assert.matches("token", shown[2])
    assert.are.equal("running", http_json("GET", base .. "/api/v1/runs/" .. id).status)
    session.js("var t = document.querySelector('#token'); t.value = " .. json.encode(token) ..
               "; t.dispatchEvent(new Event('change'));")
    session.wait("the Cancel button again", "return document.querySelector('#cancel') !== null", 15)
    session.js("document.querySelector('#toast').style.display = 'none'; document.querySelector('#cancel').click()")
    shown = session.wait("the cancel's answer", toast, 10)
    assert.are.equal("", shown[1])
    assert.matches("cancel: requested", shown[2])   -- the worker holding the run cancels it
    session.wait("the run compensated", "var b = document.querySelector('h2 .badge');" ..
                 " return b && b.textContent === 'compensated'", 20)
    session.screenshot("dashboard-run-cancelled")

    -- Resolve with a note; a dead letter settled behind the page's back is refused, said so.
    session.go(base .. "/#/dlq")
    for _, d in ipairs(dead_ids) do
      session.wait("the dead letter", "return document.querySelector('tr[data-run=\"" .. d .. "\"] button.resolve') !== null", 15)
    end
    session.js("window.prompt = function () { return 'refunded by hand, ticket 7'; };" ..
               "document.querySelector('tr[data-run=\"" .. dead_ids[1] .. "\"] button.resolve').click()")
    session.wait("the resolved row gone", "return document.querySelector('tr[data-run=\"" .. dead_ids[1] .. "\"]') === null", 10)
    assert.are.equal("resolved", http_json("GET", base .. "/api/v1/runs/" .. dead_ids[1]).status)
    local noted
    for _, h in ipairs(http_json("GET", base .. "/api/v1/runs/" .. dead_ids[1] .. "/history")) do
      if tostring(h.detail):find("refunded by hand, ticket 7", 1, true) then noted = true end
    end
    assert.is_true(noted)
    assert.are.equal(0, sh("curl -s -o /dev/null -H 'Content-Type: application/json' -H " ..
                           q("Authorization: Bearer " .. token) .. " -d '{\"note\":\"by the CLI\"}' " ..
                           q(base .. "/api/v1/dlq/" .. dead_ids[2] .. "/resolve")))
    session.js("document.querySelector('#toast').style.display = 'none';" ..
               "document.querySelector('tr[data-run=\"" .. dead_ids[2] .. "\"] button.resolve').click()")
    shown = session.wait("the refusal of a second resolve", toast, 10)
    assert.are.equal("bad", shown[1])
    assert.matches(dead_ids[2], shown[2])
    session.screenshot("dashboard-resolve-refused")

    -- A breaker opened from its list.
    session.go(base .. "/#/breakers")
    session.wait("the breaker", "return document.querySelector('tr[data-key=\"agency\"] button[data-op=open]') !== null", 15)
    session.js("document.querySelector('tr[data-key=\"agency\"] button[data-op=open]').click()")
    session.wait("the breaker open", "var b = document.querySelector('tr[data-key=\"agency\"] .badge');" ..
                 " return b && b.textContent === 'open'", 10)
    local state
    for _, b in ipairs(http_json("GET", base .. "/api/v1/breakers")) do
      if b.key == "agency" then state = b.state end
    end
    assert.are.equal("open", state)
  end)

  -- One browser serves the file's tests (spec/support/browser.lua): what a test leaves in it must
  -- be gone for the next, on the same origin (the same port) as the one that left it.
  describe("the browser a dashboard test is handed", function()
    local port

    it("may be left with storage, cookies, windows, a timer, a dialog and another size", function()
      local dir, db = B.workspace { ["dead.lua"] = B.DEAD }
      local base, session = B.serve_and_browse(dir, db)
      port = base:match(":(%d+)$")
      session.go(base .. "/#/runs")
      session.call("POST", "/window/rect", { width = 700, height = 500 })
      session.js([[
        localStorage.setItem('left', 'x'); sessionStorage.setItem('left', 'x');
        document.cookie = 'left=x; max-age=3600';
        window.open(location.href);
        setInterval(function () { localStorage.setItem('late', 'x'); }, 20);
        setTimeout(function () { alert('left open'); }, 0);]])
      H.wait_for("the dialog", function()
        return B.http_json("GET", session.base .. "/alert/text").value == "left open"
      end, 10)
    end)

    it("has none of what the test before left", function()
      assert(port, "the test before did not run")
      H.wait_for("the server before gone", function()
        return B.http_json("GET", "http://127.0.0.1:" .. port .. "/api/v1/runs") == nil
      end, 10)
      local dir, db = B.workspace { ["dead.lua"] = B.DEAD }
      local base, session = B.serve_and_browse(dir, db, "--listen 127.0.0.1:" .. port)
      session.go(base .. "/#/runs")
      os.execute("sleep 0.2")
      local r = session.call("GET", "/window/rect")
      assert.are.equal("0 0  1 1400x1000", table.concat({
        session.js("return localStorage.length"), session.js("return sessionStorage.length"),
        session.js("return document.cookie"), #session.call("GET", "/window/handles"),
        r.width .. "x" .. r.height }, " "))
    end)
  end)
end)
