-- bench/dashboard_render.lua: W13 of bench/run.lua (issue 23). The dashboard's run page for a
-- run of about 10,000 history rows (a step retried 1,668 times behind a breaker that opens and
-- half-opens, then a compensation: every kind of bar), in headless chromium driven through
-- chromedriver by the dashboard specs' own driver (spec/support/browser.lua), against
-- `mend serve` of the bench build.
-- Measured in the page: from the hash change that opens the run to the second animation frame
-- after its timeline is in the document (the fetch of the run and its history, the segments,
-- the SVG and the table, and a paint), `repeat` times; the page was loaded before.
local mend = require "mend"
local json = mend.json

-- The repository's root on the path, for the specs' browser driver and its helper.
local ROOT = (debug.getinfo(1, "S").source:match("^@(.*)/bench/[^/]*$") or ".")
package.path = ROOT .. "/?.lua;" .. package.path
local H = require "spec.helper"
local B = require "spec.support.browser"

local ATTEMPTS = 1668   -- six history rows an attempt: 10,002 rows

local LONG = [[
local mend = require "mend"
return { name = "long", retry = { max_attempts = %d, initial = 0.01, multiplier = 1, jitter = 0 },
  steps = {
    { name = "reserve", execute = function() return "r" end, compensate = function() end },
    { name = "charge", execute = function() error(mend.retryable("busy")) end },
  } }
]]

return function(o)
  assert(io.open(B.CHROMIUM) and io.open(B.CHROMEDRIVER),
         "W13: chromium and chromium-driver are not installed (make deps installs them)")
  local core = assert(package.searchpath("mend.core", package.cpath), "W13: no mend.core")
  local build = core:match("^(.*)/lib/mend/[^/]*$") or core:match("^(.*)/[^/]*$")
  H.MEND = build .. "/mend"
  local dir = o.dir .. "/w13"
  os.execute("rm -rf " .. H.quote(dir) .. " && mkdir -p " .. H.quote(dir))
  local f = assert(io.open(dir .. "/long.lua", "w"))
  f:write(string.format(LONG, ATTEMPTS))
  f:close()
  local db = dir .. "/long.db"
  local p = io.popen(H.MEND .. " run " .. H.quote(dir .. "/long.lua") .. " --db " .. H.quote(db) ..
                     " --clock virtual --json 2>/dev/null")
  local out = p:read("a")
  p:close()
  local id = assert(json.decode(out:match("(%b{})%s*$") or "{}").id, "W13: the run failed: " .. out)

  local ok, r = pcall(function()
    local base, session = B.serve_and_browse(dir, db)
    local history = assert(B.http_json("GET", base .. "/api/v1/runs/" .. id .. "/history"))
    session.go(base .. "/#/runs")
    local times = {}
    for rep = 1, (o.repeat_render or 5) do
      session.js("location.hash = '#/runs'")
      session.wait("the runs page", "return document.querySelector('tr.link') !== null && !document.querySelector('#timeline')", 30)
      session.js([[
        window.__w13 = null;
        const t0 = performance.now();
        const obs = new MutationObserver(() => {
          if (!document.querySelector('#timeline')) return;
          obs.disconnect();
          requestAnimationFrame(() => requestAnimationFrame(() => { window.__w13 = performance.now() - t0; }));
        });
        obs.observe(document.body, { childList: true, subtree: true });
        location.hash = '#/run/]] .. id .. [[';]])
      times[rep] = session.wait("the run page", "return typeof window.__w13 === 'number' && window.__w13", 120)
    end
    local bars = session.js("return document.querySelectorAll('#timeline rect.bar').length")
    table.sort(times)
    local function ms(x) return math.floor(x * 10 + 0.5) / 10 end
    return { history_rows = #history, bars = bars, render_ms_median = ms(times[math.ceil(#times / 2)]),
             render_ms_min = ms(times[1]), render_ms_max = ms(times[#times]), repeats = #times }
  end)
  B.stop_all()
  B.stop_browser()
  os.execute("rm -rf " .. H.quote(dir))
  if not ok then error(r, 0) end
  return r
end
