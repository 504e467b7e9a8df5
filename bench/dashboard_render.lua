-- bench/dashboard_render.lua: W13 of bench/run.lua (issue 23). The dashboard's run page for a
-- run of about 10,000 history rows (a step retried 1,668 times behind a breaker that opens and
-- half-opens, then a compensation: every kind of bar), in headless chromium driven through
-- chromedriver (as spec/dashboard_spec.lua does), against `mend serve` of the bench build.
-- Measured in the page: from the hash change that opens the run to the second animation frame
-- after its timeline is in the document (the fetch of the run and its history, the segments,
-- the SVG and the table, and a paint), `repeat` times; the page was loaded before.
local mend = require "mend"
local json = mend.json

local CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
local ATTEMPTS = 1668   -- six history rows an attempt: 10,002 rows

local LONG = [[
local mend = require "mend"
return { name = "long", retry = { max_attempts = %d, initial = 0.01, multiplier = 1, jitter = 0 },
  steps = {
    { name = "reserve", execute = function() return "r" end, compensate = function() end },
    { name = "charge", execute = function() error(mend.retryable("busy")) end },
  } }
]]

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function read(path)
  local f = io.open(path)
  if not f then return "" end
  local t = f:read("a")
  f:close()
  return t
end

local function http_json(method, url, body)
  local out = os.tmpname()
  local cmd = "curl -s -m 120 -o " .. q(out) .. " -X " .. method .. " -H 'Content-Type: application/json'"
  if body then cmd = cmd .. " --data-binary " .. q(type(body) == "string" and body or json.encode(body)) end
  local ok = os.execute(cmd .. " " .. q(url))
  local text = read(out)
  os.remove(out)
  if not ok then return nil, text end
  local decoded, v = pcall(json.decode, text)
  return decoded and v or nil, text
end

local function wait_for(what, pred, seconds)
  local deadline = os.time() + seconds
  while os.time() <= deadline do
    if pred() then return end
    os.execute("sleep 0.05")
  end
  error("W13: timed out waiting for " .. what, 0)
end

return function(o)
  assert(io.open(CHROMIUM) and io.open(CHROMEDRIVER),
         "W13: chromium and chromium-driver are not installed (make deps installs them)")
  local core = assert(package.searchpath("mend.core", package.cpath), "W13: no mend.core")
  local build = core:match("^(.*)/lib/mend/[^/]*$") or core:match("^(.*)/[^/]*$")
  local MEND = build .. "/mend"
  local dir = o.dir .. "/w13"
  os.execute("rm -rf " .. q(dir) .. " && mkdir -p " .. q(dir))
  local f = assert(io.open(dir .. "/long.lua", "w"))
  f:write(string.format(LONG, ATTEMPTS))
  f:close()
  local db = dir .. "/long.db"
  local p = io.popen(MEND .. " run " .. q(dir .. "/long.lua") .. " --db " .. q(db) ..
                     " --clock virtual --json 2>/dev/null")
  local out = p:read("a")
  p:close()
  local id = assert(json.decode(out:match("(%b{})%s*$") or "{}").id, "W13: the run failed: " .. out)

  local pids = {}
  local function spawn(cmd)
    local h = assert(io.popen(cmd .. " & echo $!"))
    pids[#pids + 1] = h:read("l")
    h:close()
  end
  local session
  local ok, r = pcall(function()
    spawn(MEND .. " serve --db " .. q(db) .. " --workflows " .. q(dir) .. " --listen 127.0.0.1:0 >" ..
          q(dir .. "/serve.out") .. " 2>&1")
    local base
    wait_for("mend serve", function()
      base = read(dir .. "/serve.out"):match("serving (http://[%d%.]+:%d+)/api/v1")
      return base
    end, 10)
    local history = assert(http_json("GET", base .. "/api/v1/runs/" .. id .. "/history"))
    local port
    for _ = 1, 5 do
      port = 20000 + math.random(0, 20000)
      spawn(CHROMEDRIVER .. " --port=" .. port .. " >" .. q(dir .. "/driver.log") .. " 2>&1")
      local up = pcall(wait_for, "chromedriver", function()
        local st = http_json("GET", "http://127.0.0.1:" .. port .. "/status")
        return st and st.value and st.value.ready
      end, 10)
      if up then break end
      port = nil
    end
    assert(port, "W13: chromedriver did not start: " .. read(dir .. "/driver.log"))
    local caps = { capabilities = { alwaysMatch = { browserName = "chrome", ["goog:chromeOptions"] = {
      binary = CHROMIUM,
      args = { "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--user-data-dir=" .. dir .. "/profile",
               "--window-size=1400,1000" } } } } }
    local created, raw = http_json("POST", "http://127.0.0.1:" .. port .. "/session", caps)
    local sid = created and created.value and created.value.sessionId
    assert(sid, "W13: chromedriver made no session: " .. tostring(raw))
    session = "http://127.0.0.1:" .. port .. "/session/" .. sid
    local function js(script)
      local v, text = http_json("POST", session .. "/execute/sync", '{"script":' .. json.encode(script) .. ',"args":[]}')
      assert(v and not (type(v.value) == "table" and v.value.error), "W13: " .. tostring(text))
      return v.value
    end
    assert(http_json("POST", session .. "/url", { url = base .. "/#/runs" }))
    local times = {}
    for rep = 1, (o.repeat_render or 5) do
      js("location.hash = '#/runs'")
      wait_for("the runs page", function() return js("return document.querySelector('tr.link') !== null && !document.querySelector('#timeline')") == true end, 30)
      js([[
        window.__w13 = null;
        const t0 = performance.now();
        const obs = new MutationObserver(() => {
          if (!document.querySelector('#timeline')) return;
          obs.disconnect();
          requestAnimationFrame(() => requestAnimationFrame(() => { window.__w13 = performance.now() - t0; }));
        });
        obs.observe(document.body, { childList: true, subtree: true });
        location.hash = '#/run/]] .. id .. [[';]])
      local ms
      wait_for("the run page", function()
        ms = js("return window.__w13")
        return type(ms) == "number"
      end, 120)
      times[rep] = ms
    end
    local bars = js("return document.querySelectorAll('#timeline rect.bar').length")
    table.sort(times)
    local function ms(x) return math.floor(x * 10 + 0.5) / 10 end
    return { history_rows = #history, bars = bars, render_ms_median = ms(times[math.ceil(#times / 2)]),
             render_ms_min = ms(times[1]), render_ms_max = ms(times[#times]), repeats = #times }
  end)
  if session then http_json("DELETE", session) end
  for i = #pids, 1, -1 do os.execute("kill " .. pids[i] .. " 2>/dev/null") end
  os.execute("sleep 0.3; rm -rf " .. q(dir))
  if not ok then error(r, 0) end
  return r
end
