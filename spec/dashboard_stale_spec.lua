-- The dashboard's refreshes and clicks against what a person does (comes back to a page before
-- the other one drew, and clicks on what a stale view left) and what a network does (an answer
-- that never comes). Headless chromium (spec/support/browser.lua) on a real `mend serve`;
-- slowness is made in the page (its fetch wrapped, answers held: B.hold_fetches).
local H = require "spec.helper"
local B = require "spec.support.browser"

local function workspace() return B.workspace { ["dead.lua"] = B.DEAD } end

-- #sqlite: what is asserted is the page's own doing (its fetch wrapped), whatever store the
-- server reads; the PostgreSQL store's answers to the page are in the other dashboard specs.
describe("the dashboard after a stale view or a lost answer, in chromium #sqlite", function()
  after_each(function() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)

  it("goes to the run a person retried, after they came back to a queue that had not changed, "
     .. "or when a refresh was given up while the retry waited", function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "virtual" })
    eng:load(dir .. "/dead.lua")
    local id = eng:start("dead", { n = 1 })
    local id2 = eng:start("dead", { n = 2 })
    eng:run()
    H.close(eng)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/dlq")
    session.wait("the dead letter", "return document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry') !== null", 15)
    -- The person opens the run and goes Back before its page came (the run's answers held
    -- until the queue is drawn again, then read: drawn nowhere).
    session.js("window.__real = window.fetch;" .. B.hold_fetches("u.indexOf('/api/v1/runs/') >= 0")
      .. [[location.hash = '#/run/]] .. id .. [[';
      setTimeout(function () { history.back(); }, 300);]])
    session.wait("back on the dead letters", "return location.hash === '#/dlq'", 10)
    session.wait("the queue drawn again", "var h = document.querySelector('#view h2');"
                 .. " return h && h.textContent === 'Dead letters';", 10)
    session.js("window.__release()")
    session.wait("the run's late answers read",
                 "return window.__held > 0 && window.__read === window.__held", 10)
    session.js("window.fetch = window.__real")
    assert.are.equal("Dead letters", session.js("return document.querySelector('#view h2').textContent"))
    session.js("document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry').click()")
    session.wait("the retried run's page", "return location.hash === '#/run/" .. id .. "'", 10)

    -- The page's own timers made short (its 10 s give-up 0.6 s, its 5 s refresh 0.3 s), every
    -- list of the queue after the first lost, and the Retry's answer held until a refresh of the
    -- queue was given up.
    session.js([[var st = window.setTimeout, real = window.__real, lists = 0; window.__gaveUp = 0;
      window.setTimeout = function (f, ms) {
        if (ms === 10000) return st(function () { window.__gaveUp++; f(); }, 600);
        return st(f, ms === 5000 ? 300 : ms); };
      window.fetch = function (url, opts) {
        if (opts && opts.method === 'POST') return new Promise(function (ok) {
          (function held() { if (window.__gaveUp > 0) ok(real(url, opts)); else st(held, 50); })(); });
        if (String(url).indexOf('/api/v1/dlq') >= 0 && lists++ > 0) return new Promise(function () {});
        return real(url, opts); };
      location.hash = '#/dlq';]])
    local retry = "document.querySelector('tr[data-run=\"" .. id2 .. "\"] button.retry')"
    session.wait("the second dead letter", "return " .. retry .. " !== null", 10)
    session.js(retry .. ".click()")
    local went = pcall(session.wait, "the run", "return location.hash === '#/run/" .. id2 .. "'", 5)
    assert(went, "not on the retried run's page (given up, where, toast): " .. session.js(
      "return [window.__gaveUp, location.hash, document.querySelector('#toast').textContent].join(' | ')"))
  end)

  it("asks again after an answer that never came", function()
    local dir, db = workspace()
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/runs")
    session.wait("the runs", "return document.querySelector('#runs-note').textContent !== ''", 15)
    -- One list of runs is lost on the way (a connection dropped without a word); the ones after
    -- it are answered.
    session.js([[window.__asked = 0; window.__lost = false; var real = window.fetch;
      window.fetch = function (url, opts) {
        if (String(url).indexOf('/api/v1/runs?') < 0) return real(url, opts);
        if (!window.__lost) { window.__lost = true; return new Promise(function () {}); }
        window.__asked++; return real(url, opts); };]])
    session.wait("the lost request", "return window.__lost", 10)
    -- the live refresh is every 2 s: 20 s is ten of them
    session.wait("a refresh after the lost one", "return window.__asked > 0", 20)
  end)
end)
