-- The dashboard's refreshes, from docs/http-api.md ("The dashboard"): headless chromium
-- (spec/support/browser.lua) on a real `mend serve`. A page is asked for again only once the
-- server answered the time before (a slow server is never asked twice at once), never once the
-- person went to another page, and a click's answer that comes after they went draws nothing
-- over the page they are on nor stops its refresh. Slowness is made in the page (its fetch
-- wrapped), with seconds of margin around the refreshes it races (every 2 s for runs, 5 s for
-- dead letters and breakers).
local H = require "spec.helper"
local B = require "spec.support.browser"

local http_json = B.http_json

local function workspace() return B.workspace { ["dead.lua"] = B.DEAD } end

local function run_of(base, id) return http_json("GET", base .. "/api/v1/runs/" .. id) end

-- #sqlite: what is asserted is the page's own doing (its fetch wrapped), whatever store the
-- server reads; the PostgreSQL store's answers to the page are in the other dashboard specs.
describe("the dashboard's refreshes, in chromium #sqlite", function()
  after_each(function() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)

  it("keeps the page a person went to, and its refresh, when a click's answer comes after", function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "virtual" })
    eng:load(dir .. "/dead.lua")
    local ids = { (eng:start("dead", { n = 1 })), (eng:start("dead", { n = 2 })) }
    eng:run()
    H.close(eng)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/dlq")
    for _, id in ipairs(ids) do
      session.wait("the dead letter", "return document.querySelector('tr[data-run=\"" .. id .. "\"] button.resolve') !== null", 15)
    end
    -- Retry on one, Resolve on the other, each answered 1.5 s late: the person has gone to
    -- the breakers meanwhile.
    session.js([[window.__breakers = 0; var real = window.fetch; window.fetch = function (url, opts) {
      if (String(url).indexOf('/api/v1/breakers') >= 0) window.__breakers++;
      var p = real(url, opts);
      if (!opts || opts.method !== 'POST') return p;
      return new Promise(function (ok) { setTimeout(function () { ok(p); }, 1500); }); };
      window.prompt = function () { return 'settled by hand'; };
      document.querySelector('tr[data-run="]] .. ids[1] .. [["] button.retry').click();
      document.querySelector('tr[data-run="]] .. ids[2] .. [["] button.resolve').click();
      location.hash = '#/breakers';]])
    session.wait("the breakers' page", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Breakers';", 10)
    H.wait_for("the resolve", function() return run_of(base, ids[2]).status == "resolved" end, 10)
    os.execute("sleep 1")   -- (the retry, sent with it, has been answered too)
    assert.are.same({ "Breakers", "#/breakers" },
                    session.js("return [document.querySelector('#view h2').textContent, location.hash]"))
    -- and the breakers' refresh (every 5 s) goes on
    session.js("window.__breakers = 0")
    session.wait("the breakers' refresh", "return window.__breakers > 0", 8)
  end)

  it("asks the server again only once it answered, and nothing for a page left", function()
    local dir, db = workspace()
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/runs")
    session.wait("the runs", "return document.querySelector('#runs-note').textContent !== ''", 15)
    -- Every list of runs answers 3 s late; the live refresh is every 2 s.
    session.js([[window.__inflight = 0; window.__most = 0; window.__asked = 0; var real = window.fetch;
      window.fetch = function (url, opts) {
        if (String(url).indexOf('/api/v1/runs?') < 0) return real(url, opts);
        window.__asked++; window.__inflight++; window.__most = Math.max(window.__most, window.__inflight);
        var p = real(url, opts);
        return new Promise(function (ok) { setTimeout(function () { window.__inflight--; ok(p); }, 3000); }); };]])
    os.execute("sleep 6.5")
    local seen = session.js("return [window.__most, window.__asked]")
    assert.are.equal(1, seen[1], seen[2] .. " lists asked for")
    session.js("location.hash = '#/breakers'; window.__asked = 0")
    os.execute("sleep 3")
    assert.are.equal(0, session.js("return window.__asked"))
  end)
end)
