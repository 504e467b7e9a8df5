-- The dashboard's refreshes, from docs/http-api.md ("The dashboard"): headless chromium
-- (spec/support/browser.lua) on a real `mend serve`. A page is asked for again only once the
-- server answered the time before (a slow server is never asked twice at once), never once the
-- person went to another page, and a click's answer that comes after they went draws nothing
-- over the page they are on nor stops its refresh. Slowness is made in the page: answers held
-- until the test lets them go (B.hold_fetches), and the runs' refresh made 0.2 s (its 2 s
-- timer shortened) where what is checked is what the page does over several of them.
local H = require "spec.helper"
local B = require "spec.support.browser"

local http_json, hold_fetches = B.http_json, B.hold_fetches

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
    -- Retry on one, Resolve on the other, their answers held: the person has gone to the
    -- breakers meanwhile.
    session.js(hold_fetches("o && o.method === 'POST'"))
    session.js([[window.__breakers = 0; var held = window.fetch;
      window.fetch = function (url, opts) {
        if (String(url).indexOf('/api/v1/breakers') >= 0) window.__breakers++;
        return held(url, opts); };
      window.prompt = function () { return 'settled by hand'; };
      document.querySelector('tr[data-run="]] .. ids[1] .. [["] button.retry').click();
      document.querySelector('tr[data-run="]] .. ids[2] .. [["] button.resolve').click();
      location.hash = '#/breakers';]])
    session.wait("the breakers' page", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Breakers';", 10)
    H.wait_for("the resolve", function() return run_of(base, ids[2]).status == "resolved" end, 10)
    session.js("window.__release()")
    session.wait("both answers read", "return window.__held === 2 && window.__read === 2", 10)
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
    -- The live refresh every 0.2 s (its 2 s timer shortened), and every list of runs held: the
    -- one asked for is not answered over five refreshes' time, and none is asked meanwhile;
    -- answered, the next comes.
    session.js([[var st = window.setTimeout;
      window.setTimeout = function (f, ms) { return st(f, ms === 2000 ? 200 : ms); };]])
    session.js(hold_fetches("u.indexOf('/api/v1/runs?') >= 0"))
    session.wait("a list asked for", "return window.__held > 0", 10)
    os.execute("sleep 1")
    assert.are.equal(1, session.js("return window.__held"))
    session.js("window.__release()")
    session.wait("the next list asked for once the first was answered",
                 "return window.__held === 2", 10)
    -- on another page, nothing over five refreshes' time
    session.js("location.hash = '#/breakers'; window.__release(); window.__held = 0")
    os.execute("sleep 1")
    assert.are.equal(0, session.js("return window.__held"))
  end)
end)
