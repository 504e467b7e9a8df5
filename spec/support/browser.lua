-- A headless chromium driven through chromedriver's WebDriver protocol (spoken with curl), and
-- the `mend serve` it browses, for the specs of the dashboard that look at it as a user does.
-- One driver and one browser serve a whole spec file: started on a test's first browse(),
-- handed clean to each test after (one new tab; cookies, storage and cache of every origin
-- cleared; dialogs dismissed; the window's size restored), and ended by stop_browser() in the
-- file's teardown (or at exit). A test that needs a browser of its own asks browse(dir,
-- { fresh = true }). It owns the processes it starts (the server, the drivers, the workers a
-- spec asks for) and stops them by their ids only: a test's in stop_all(), the file's browser
-- in stop_browser(). It must never decide what a spec asserts: it opens pages, runs scripts in
-- them and answers what they return.
--
--   local B = require "spec.support.browser"
--   local base, session = B.serve_and_browse(dir, db)
--   session.go(base .. "/#/runs"); session.wait("rows", "return ...", 15)
--   after_each: B.stop_all()      teardown: B.stop_browser()
local H = require "spec.helper"
local mend = require "mend"

local M = {}
local q, sh, json = H.quote, H.shell, mend.json

M.CHROMIUM, M.CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
M.ARTIFACTS = os.getenv("MEND_ARTIFACT_DIR") or "build/artifacts"
M.WIDTH, M.HEIGHT = 1400, 1000

-- A request with curl: the decoded JSON answer (nil when it is not JSON) and the raw text.
function M.http_json(method, url, body, headers)
  local out = os.tmpname()
  local cmd = "curl -s -m 60 -o " .. q(out) .. " -X " .. method .. " -H 'Content-Type: application/json'"
  for _, h in ipairs(headers or {}) do cmd = cmd .. " -H " .. q(h) end
  if body then cmd = cmd .. " --data-binary " .. q(type(body) == "string" and body or json.encode(body)) end
  local rc = sh(cmd .. " " .. q(url))
  local text = H.read(out)
  os.remove(out)
  if rc ~= 0 then return nil, "curl exit " .. tostring(rc) end
  local ok, v = pcall(json.decode, text)
  return ok and v or nil, text
end
local http_json = M.http_json

-- A WebDriver session on chromedriver at `port`.
local function webdriver(port, profile)
  local base = "http://127.0.0.1:" .. port
  local caps = { capabilities = { alwaysMatch = { browserName = "chrome", ["goog:chromeOptions"] = {
    binary = M.CHROMIUM,
    args = { "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--user-data-dir=" .. profile,
             "--window-size=" .. M.WIDTH .. "," .. M.HEIGHT } } } } }
  local created, raw = http_json("POST", base .. "/session", caps)
  local sid = created and created.value and created.value.sessionId
  assert(sid, "chromedriver made no session: " .. tostring(raw))
  -- origins: every origin a test went to, whose storage the next test must not find
  local s = { base = base .. "/session/" .. sid, origins = {} }
  function s.call(method, path, body)
    local v, text = http_json(method, s.base .. path, body)
    assert(v, "webdriver " .. path .. ": " .. tostring(text))
    assert(not (type(v.value) == "table" and v.value.error), "webdriver " .. path .. ": " .. tostring(text))
    return v.value
  end
  function s.go(url)
    local origin = url:match("^(https?://[^/?#]+)")
    if origin then s.origins[origin] = true end
    s.call("POST", "/url", { url = url })
  end
  -- (an empty Lua table would be encoded as an object: WebDriver wants a list)
  function s.js(script) return s.call("POST", "/execute/sync", '{"script":' .. json.encode(script) .. ',"args":[]}') end
  -- A screenshot of the page, kept as M.ARTIFACTS/<name>.png (<name>-pg.png on PostgreSQL).
  function s.screenshot(name)
    local png = s.call("GET", "/screenshot")
    local b64 = os.tmpname()
    local f = assert(io.open(b64, "wb"))
    f:write(png)
    f:close()
    os.execute("mkdir -p " .. q(M.ARTIFACTS))
    assert(os.execute("base64 -d " .. q(b64) .. " > " .. q(M.ARTIFACTS .. "/" .. name .. (H.PG and "-pg" or "") .. ".png")))
    os.remove(b64)
  end
  function s.close() http_json("DELETE", s.base) end
  -- Polls a script until it returns a true value, for at most `seconds`. A timeout says what
  -- the page showed then (its address, its view, its toast): a failure seen once in CI is
  -- then read, not guessed at.
  function s.wait(what, script, seconds)
    local v
    local ok, err = pcall(H.wait_for, what, function()
      v = s.js(script)
      return v ~= nil and v ~= false and v ~= json.null
    end, seconds)
    if ok then return v end
    local seen_ok, seen = pcall(s.js, [[
      var v = document.querySelector('#view'), t = document.querySelector('#toast');
      return location.href + '\n  view: ' + (v ? v.innerHTML.replace(/\s+/g, ' ').slice(0, 600) : '(none)')
        + '\n  toast: ' + (t ? t.style.display + ' ' + t.className + ' ' + t.textContent : '(none)');]])
    error(tostring(err) .. "; the page then: " .. (seen_ok and tostring(seen) or "(unreadable: " .. tostring(seen) .. ")"), 0)
  end
  return s
end

-- Several requests of a session in one curl, one after the other ({ method, path, body }...):
-- each answer's decoded JSON, or false. One process for all: a process costs a tenth of a
-- second on a loaded machine, a request to the driver a few milliseconds.
local SEP = "\n--mend-batch--\n"
local function batch(s, reqs)
  local args = {}
  for i, r in ipairs(reqs) do
    local body = r[3] and (type(r[3]) == "string" and r[3] or json.encode(r[3]))
    args[#args + 1] = (i > 1 and "--next " or "") .. "-s -m 60 -w " .. q(SEP) .. " -X " .. r[1]
      .. " -H 'Content-Type: application/json'" .. (body and " --data-binary " .. q(body) or "")
      .. " " .. q(s.base .. r[2])
  end
  local p = assert(io.popen("curl " .. table.concat(args, " ")))
  local text = p:read("a")
  p:close()
  local answers, at = {}, 1
  for _ = 1, #reqs do
    local e = text:find(SEP, at, true)
    local ok, v = pcall(json.decode, text:sub(at, (e or 0) - 1))
    answers[#answers + 1] = ok and type(v) == "table" and v
    at = e and e + #SEP or #text + 1
  end
  return answers
end

-- What a test could leave to the next, undone: a dialog open, windows and their pages (with
-- their timers, globals and sessionStorage: a new tab has none), cookies, the HTTP cache, and
-- the storage of every origin it went to. An error when the browser does not answer as asked.
local function reset(s)
  local function check(a, what)
    assert(a and not (type(a.value) == "table" and a.value.error), "browser reset: " .. what)
    return a.value
  end
  local function cdp(cmd, params)
    return { "POST", "/goog/cdp/execute", { cmd = cmd, params = params or {} } }
  end
  local DISMISS = { "POST", "/alert/dismiss", {} }   -- (no dialog: an error, not looked at)
  local a = batch(s, { DISMISS, { "GET", "/window/handles" },
                       { "POST", "/window/new", { type = "tab" } } })
  local old, fresh = check(a[2], "window handles"), check(a[3], "new tab").handle
  local reqs, looked = {}, {}
  for _, h in ipairs(old) do
    reqs[#reqs + 1] = { "POST", "/window", { handle = h } }
    reqs[#reqs + 1] = DISMISS
    reqs[#reqs + 1] = { "POST", "/execute/sync", '{"script":"return location.origin","args":[]}' }
    looked[#reqs] = true
    reqs[#reqs + 1] = { "DELETE", "/window" }
  end
  reqs[#reqs + 1] = { "POST", "/window", { handle = fresh } }
  reqs[#reqs + 1] = cdp("Network.clearBrowserCookies")
  reqs[#reqs + 1] = cdp("Network.clearBrowserCache")
  reqs[#reqs + 1] = { "POST", "/window/rect", { width = M.WIDTH, height = M.HEIGHT } }
  local function clear(origin)
    return cdp("Storage.clearDataForOrigin", { origin = origin, storageTypes = "all" })
  end
  local cleared = {}
  for origin in pairs(s.origins) do
    reqs[#reqs + 1] = clear(origin)
    cleared[origin] = true
  end
  -- A page may have gone to an origin no go() named: its storage is cleared after.
  local more = {}
  for i, ans in ipairs(batch(s, reqs)) do
    if looked[i] then
      local origin = ans and ans.value
      if type(origin) == "string" and origin:match("^https?://") and not cleared[origin] then
        cleared[origin] = true
        more[#more + 1] = clear(origin)
      end
    elseif reqs[i] ~= DISMISS then
      check(ans, reqs[i][1] .. " " .. reqs[i][2])
    end
  end
  for i, ans in ipairs(#more > 0 and batch(s, more) or {}) do check(ans, more[i][2]) end
  s.origins = {}
end

-- The page of the current window left for about:blank (its timers and requests end with it),
-- its origin noted for reset() to clear.
local function quiet(s)
  local a = batch(s, { { "POST", "/alert/dismiss", {} },
                       { "POST", "/execute/sync", '{"script":"return location.origin","args":[]}' },
                       { "POST", "/url", { url = "about:blank" } } })
  local origin = a[2] and a[2].value
  if type(origin) == "string" and origin:match("^https?://") then s.origins[origin] = true end
  assert(a[3] and not (type(a[3].value) == "table" and a[3].value.error),
         "browser quiet: about:blank")
end

local procs, sessions = {}, {}
-- The file's browser: { session, pid (its driver's), dir (its profile and log), used (handed
-- to a test since its last reset) }, or nil until a test browses.
local shared

-- Starts `cmd` in the background; its process id (kept, for stop_all).
function M.spawn(cmd)
  local p = assert(io.popen(cmd .. " & echo $!"))
  local pid = p:read("l")
  p:close()
  procs[#procs + 1] = pid
  return pid
end

-- `mend serve` on db (the workflows of dir, flags `extra`; on a port of its choosing unless
-- they say --listen): its base URL and process id.
function M.serve(dir, db, extra)
  extra = extra or ""
  local out = dir .. "/serve-" .. (#procs + 1) .. ".out"
  local listen = extra:find("--listen", 1, true) and "" or " --listen 127.0.0.1:0"
  local pid = M.spawn(H.MEND .. " serve --db " .. q(db) .. " --workflows " .. q(dir) .. listen ..
                      " " .. extra .. " >" .. q(out) .. " 2>>" .. q(dir .. "/serve.err"))
  local base
  H.wait_for("the server", function()
    base = H.read(out):match("serving (http://[%d%.]+:%d+)/api/v1")
    return base ~= nil
  end, 10)
  return base, pid
end

-- chromedriver on a port nobody answers on (its log and the browser's profile in dir), and a
-- WebDriver session on it: the session and the driver's process id.
local function start_browser(dir)
  -- Two suites may run side by side (ctest -j2): a driver that found its port taken exits
  -- while the other's answers, so the driver must still be ours once one answers.
  local port, pid
  local function ready()
    local st = http_json("GET", "http://127.0.0.1:" .. port .. "/status")
    return st and st.value and st.value.ready
  end
  for _ = 1, 5 do
    port = 20000 + math.random(0, 20000)
    if not ready() then
      local p = assert(io.popen(M.CHROMEDRIVER .. " --port=" .. port .. " >"
                                .. q(dir .. "/driver.log") .. " 2>&1 & echo $!"))
      pid = p:read("l")
      p:close()
      local ok = pcall(H.wait_for, "chromedriver", ready, 10)
      if ok and os.execute("kill -0 " .. pid .. " 2>/dev/null") then break end
      os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    end
    port = nil
  end
  assert(port, "chromedriver did not start: " .. H.read(dir .. "/driver.log"))
  local ok, s = pcall(webdriver, port, dir .. "/profile")
  if not ok then
    os.execute("kill -TERM " .. pid .. " 2>/dev/null")
    error(s, 0)
  end
  return s, pid
end

-- Ends the file's browser (its session, then its driver) and removes its profile.
function M.stop_browser()
  if not shared then return end
  local b = shared
  shared = nil
  pcall(b.session.close)
  os.execute("kill -TERM " .. b.pid .. " 2>/dev/null")
  os.execute("rm -rf " .. q(b.dir))
end
-- A process that ends without a teardown still ends the browser (busted closes its state).
M.at_exit = setmetatable({}, { __gc = function() M.stop_browser() end })

-- A WebDriver session with a clean page: the file's browser (started on first use), or with
-- { fresh = true } one of the test's own (its profile and log in dir), ended by stop_all.
function M.browse(dir, opts)
  if opts and opts.fresh then
    local s, pid = start_browser(dir)
    procs[#procs + 1] = pid
    sessions[#sessions + 1] = s
    return s
  end
  if shared and shared.used and not pcall(reset, shared.session) then M.stop_browser() end
  if not shared then
    local p = assert(io.popen("mktemp -d"))
    local bdir = p:read("l")
    p:close()
    local s, pid = start_browser(bdir)
    shared = { session = s, pid = pid, dir = bdir }
  end
  shared.used = true
  return shared.session
end

function M.serve_and_browse(dir, db, extra)
  local base = M.serve(dir, db, extra)
  return base, M.browse(dir)
end

-- Stops one process this module started.
function M.stop(pid)
  os.execute("kill -TERM " .. pid .. " 2>/dev/null")
  for i = 1, #procs do
    if procs[i] == pid then table.remove(procs, i) break end
  end
end

-- Quiets the file's browser (its page left for a blank one; a browser that cannot be is ended),
-- ends the test's own sessions and stops every process it started, newest first. The browser
-- is made clean when next handed out: a file's last test costs no reset.
function M.stop_all()
  -- First, so that no page of the test still asks its servers for anything as they stop (or
  -- asks the next test's server, on a port used again).
  if shared and shared.used and not pcall(quiet, shared.session) then M.stop_browser() end
  for i = #sessions, 1, -1 do pcall(sessions[i].close) sessions[i] = nil end
  local stopping = {}
  for i = #procs, 1, -1 do
    os.execute("kill -TERM " .. procs[i] .. " 2>/dev/null")
    stopping[#stopping + 1] = procs[i]
    procs[i] = nil
  end
  -- Gone before the next test: its port free, its database no longer open when H.cleanup
  -- removes the file. One that outlives 10 s of its grace is killed.
  local sys, deadline = require("system"), H.wall() + 10
  for _, pid in ipairs(stopping) do
    while H.alive(pid) and H.wall() < deadline do sys.sleep(0.01) end
    if H.alive(pid) then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
  end
end
-- A workflow whose run ends in the dead-letter queue: its charge fails for good and its
-- refund's compensation cannot be done.
M.DEAD = [[
local mend = require "mend"
return { name = "dead", compensate_retry = { max_attempts = 1 }, steps = {
  { name = "refund", execute = function() return 1 end,
    compensate = function() error(mend.retryable("refund service down")) end },
  { name = "charge", execute = function() error(mend.fatal("card declined")) end } } }]]

-- A script for session.js that makes a page's answers late without a clock: from then on the
-- page's requests for which the JS expression `match` (of `u`, the URL as a string, and `o`,
-- fetch's options) is true are held until the test lets them go. window.__held counts them,
-- window.__release() lets those held so far go, and window.__read counts the held answers the
-- page has read and acted on (a timer set as a body's promise settles fires once the page's
-- own promise chain on it has run: what it draws, it has drawn).
function M.hold_fetches(match)
  return [[(function () {
    var real = window.fetch, st = window.setTimeout, held = [];
    window.__held = 0; window.__read = 0;
    window.__release = function () { held.splice(0).forEach(function (go) { go(); }); };
    function read() { st(function () { window.__read++; }, 0); }
    window.fetch = function (url, o) {
      var u = String(url), p = real(url, o);
      if (!(]] .. match .. [[)) return p;
      window.__held++;
      return new Promise(function (ok) { held.push(function () { ok(p.then(function (r) {
        var body = r.json.bind(r);
        r.json = function () { var b = body(); b.then(read, read); return b; };
        return r; })); }); }); };
  })();]]
end

-- A directory of its own with the workflow files given ({ ["dead.lua"] = text, ... }) and a
-- database beside them: dir, db.
function M.workspace(workflows)
  local dir = H.tmp_dir()
  for name, text in pairs(workflows) do H.write_file(dir, name, text) end
  return dir, H.new_db(dir, "dash.db")
end

return M
