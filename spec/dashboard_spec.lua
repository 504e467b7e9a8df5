-- The dashboard of `mend serve` in a real browser: Debian's chromium, driven through
-- chromedriver's WebDriver protocol (spoken with curl), against a server on a database with a
-- known run. The run's timeline must have the bars its history says (attempts, retry waits, a
-- breaker wait, a failed compensation); a click on Retry in the dead-letter list must carry the
-- run on to its end. Screenshots go to build/artifacts (MEND_ARTIFACT_DIR).
local H = require "spec.helper"
local mend = require "mend"

local MEND, q, sh = H.MEND, H.quote, H.shell
local json = mend.json

local CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
local ARTIFACTS = os.getenv("MEND_ARTIFACT_DIR") or "build/artifacts"

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

local function http_json(method, url, body)
  local out = os.tmpname()
  local cmd = "curl -s -m 60 -o " .. q(out) .. " -X " .. method .. " -H 'Content-Type: application/json'"
  if body then cmd = cmd .. " --data-binary " .. q(type(body) == "string" and body or json.encode(body)) end
  local rc = sh(cmd .. " " .. q(url))
  local text = H.read(out)
  os.remove(out)
  if rc ~= 0 then return nil, "curl exit " .. tostring(rc) end
  local ok, v = pcall(json.decode, text)
  return ok and v or nil, text
end

-- A WebDriver session on chromedriver at `port`.
local function webdriver(port, profile)
  local base = "http://127.0.0.1:" .. port
  local caps = { capabilities = { alwaysMatch = { browserName = "chrome", ["goog:chromeOptions"] = {
    binary = CHROMIUM,
    args = { "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--user-data-dir=" .. profile, "--window-size=1400,1000" } } } } }
  local created, raw = http_json("POST", base .. "/session", caps)
  local sid = created and created.value and created.value.sessionId
  assert(sid, "chromedriver made no session: " .. tostring(raw))
  local s = { base = base .. "/session/" .. sid }
  function s.call(method, path, body)
    local v, text = http_json(method, s.base .. path, body)
    assert(v, "webdriver " .. path .. ": " .. tostring(text))
    assert(not (type(v.value) == "table" and v.value.error), "webdriver " .. path .. ": " .. tostring(text))
    return v.value
  end
  function s.go(url) s.call("POST", "/url", { url = url }) end
  -- (an empty Lua table would be encoded as an object: WebDriver wants a list)
  function s.js(script) return s.call("POST", "/execute/sync", '{"script":' .. json.encode(script) .. ',"args":[]}') end
  function s.screenshot(name)
    local png = s.call("GET", "/screenshot")
    local b64 = os.tmpname()
    local f = assert(io.open(b64, "wb"))
    f:write(png)
    f:close()
    os.execute("mkdir -p " .. q(ARTIFACTS))
    assert(os.execute("base64 -d " .. q(b64) .. " > " .. q(ARTIFACTS .. "/" .. name .. (H.PG and "-pg" or "") .. ".png")))
    os.remove(b64)
  end
  function s.close() http_json("DELETE", s.base) end
  -- Polls a script until it returns a true value, for at most `seconds`.
  function s.wait(what, script, seconds)
    local v
    H.wait_for(what, function() v = s.js(script); return v ~= nil and v ~= false and v ~= json.null end, seconds)
    return v
  end
  return s
end

local procs = {}
local function spawn(cmd)
  local p = assert(io.popen(cmd .. " & echo $!"))
  local pid = p:read("l")
  p:close()
  procs[#procs + 1] = pid
  return pid
end

describe("the dashboard in chromium", function()
  local session
  after_each(function()
    if session then pcall(session.close) session = nil end
    for i = #procs, 1, -1 do
      os.execute("kill -TERM " .. procs[i] .. " 2>/dev/null")
      procs[i] = nil
    end
    os.execute("sleep 0.3")
    H.cleanup()
  end)

  it("draws a run's timeline and carries a dead letter on when Retry is clicked", function()
    assert(io.open(CHROMIUM) and io.open(CHROMEDRIVER),
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

    spawn(MEND .. " serve --db " .. q(db) .. " --workflows " .. q(dir) .. " --listen 127.0.0.1:0 >" ..
          q(dir .. "/serve.out") .. " 2>" .. q(dir .. "/serve.err"))
    local base
    H.wait_for("the server", function()
      base = H.read(dir .. "/serve.out"):match("serving (http://[%d%.]+:%d+)/api/v1")
      return base ~= nil
    end, 10)
    local port
    for _ = 1, 5 do
      port = 20000 + math.random(0, 20000)
      spawn(CHROMEDRIVER .. " --port=" .. port .. " >" .. q(dir .. "/driver.log") .. " 2>&1")
      local ok = pcall(H.wait_for, "chromedriver", function()
        local st = http_json("GET", "http://127.0.0.1:" .. port .. "/status")
        return st and st.value and st.value.ready
      end, 10)
      if ok then break end
      port = nil
    end
    assert(port, "chromedriver did not start: " .. H.read(dir .. "/driver.log"))
    session = webdriver(port, dir .. "/profile")

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
end)
