-- The dashboard when things go wrong, from docs/http-api.md ("The dashboard") alone: headless
-- chromium (spec/support/browser.lua) on a real `mend serve`. A server that stopped, or a 503
-- (from a proxy in front of it), must be said on the page; an answer that comes late (a slow
-- server) must never draw over the page the person went to meanwhile, nor take the runs'
-- second page away; a run link the page cannot read must be said so. Slowness is made in the
-- page: the answers the test names are held until it lets them go (B.hold_fetches), and it
-- waits for each step's sign (a refresh asked for, the late answers read), never for time.
local H = require "spec.helper"
local B = require "spec.support.browser"
local P = require "spec.support.pg_hold"

local http_json, hold_fetches = B.http_json, B.hold_fetches

local OK = [[return { name = "ok", steps = { { name = "one", execute = function() return 1 end } } }]]

local function workspace() return B.workspace { ["ok.lua"] = OK, ["dead.lua"] = B.DEAD } end

-- A workspace whose database holds one dead letter (B.DEAD's run, parked): dir, db, the run.
local function dead_letter()
  local dir, db = workspace()
  local eng = H.new_engine({ db = db, clock = "virtual" })
  eng:load(dir .. "/dead.lua")
  local id = eng:start("dead", {})
  eng:run()
  H.close(eng)
  return dir, db, id
end

-- The toast's class and text once it is shown (session.wait's test).
local toast = "var t = document.querySelector('#toast'); "
              .. "return t.style.display === 'block' && [t.className, t.textContent];"

local function run_of(base, id) return http_json("GET", base .. "/api/v1/runs/" .. id) end

describe("the dashboard when the server is slow, gone or refuses, in chromium", function()
  after_each(function() P.release() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)
  local it_pg = H.PG and it or pending
  -- #sqlite: a late answer, a bad link, a 503 and a stopped server are the page's doing or the
  -- server's, whatever store it reads; a refusal of PostgreSQL's own is it_pg's below.

  it("keeps the page a person went to when a refresh of the page they left answers late #sqlite",
     function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "real" })
    eng:load(dir .. "/ok.lua")
    local id = eng:start("ok", {}, { detached = true })   -- running: no worker takes it
    H.close(eng)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/run/" .. id)
    session.wait("the run's page", "var b = document.querySelector('h2 .badge'); return b && b.textContent === 'running'", 15)
    -- The run's answers are held: the page's next refresh (every 2 s) is waiting for them when
    -- the person opens the dead letters, and they come once that page is drawn.
    session.js(hold_fetches("u.indexOf('/runs/') >= 0"))
    session.wait("a refresh of the run under way", "return window.__held > 0", 10)
    session.js("location.hash = '#/dlq'")
    session.wait("the dead letters' page", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Dead letters';", 10)
    session.js("window.__release()")
    session.wait("the late answers read", "return window.__read === window.__held", 10)
    assert.are.equal("Dead letters", session.js("return document.querySelector('#view h2').textContent"))
  end)

  it("keeps the runs' second page when a refresh started before the click answers after it", function()
    local dir, db = workspace()
    local eng = H.new_engine({ db = db, clock = "real" })
    eng:load(dir .. "/ok.lua")
    for i = 1, 60 do eng:start("ok", { n = i }, { detached = true }) end
    H.close(eng)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/runs")
    session.wait("the first page", "return document.querySelectorAll('#runs-body tr[data-run]').length === 50", 15)
    -- The first page's answers are held from now on: the live refresh (every 2 s) is waiting
    -- for one when "more" is clicked, and it comes after the second page's.
    session.js(hold_fetches("u.indexOf('/runs?') >= 0 && u.indexOf('cursor=') < 0"))
    session.wait("a refresh under way", "return window.__held > 0", 10)
    session.js("document.querySelector('#more').click()")
    session.wait("the second page", "return document.querySelectorAll('#runs-body tr[data-run]').length === 60", 10)
    session.js("window.__release()")
    session.wait("the late answer read", "return window.__read === window.__held", 10)
    assert.are.equal(60, session.js("return document.querySelectorAll('#runs-body tr[data-run]').length"))
  end)

  it("says what is wrong with a run link it cannot read #sqlite", function()
    local dir, db = workspace()
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/run/nosuchrun")
    local err = session.wait("the unknown run's error", "var e = document.querySelector('#view .err'); return e && e.textContent;", 15)
    assert.matches("nosuchrun", err)
    session.js("location.hash = '#/run/%E0%A4%A'")   -- a percent-encoding cut short
    err = session.wait("the bad link's error", "var e = document.querySelector('#view .err'); return e && e.textContent;", 10)
    assert.is_nil(err:find("nosuchrun", 1, true), "the page still shows the run before: " .. err)
  end)

  it("says so when the server has stopped or answers 503 #sqlite", function()
    local dir, db, id = dead_letter()
    local base, pid = B.serve(dir, db)
    local session = B.browse(dir)

    -- A 503 as a proxy in front of mend would give it (no JSON): the click's answer is said.
    session.go(base .. "/#/dlq")
    session.wait("the dead letter", "return document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry') !== null", 15)
    session.js([[var real = window.fetch; window.fetch = function (url, opts) {
      if (opts && opts.method === 'POST') return Promise.resolve(new Response('upstream down', { status: 503, statusText: 'Service Unavailable' }));
      return real(url, opts); };
      document.querySelector('button.retry').click();]])
    local shown = session.wait("the 503", toast, 10)
    assert.are.equal("bad", shown[1])
    assert.matches("503", shown[2])
    assert.are.equal("needs_attention", run_of(base, id).status)

    -- The server stopped: the runs' live refresh says it cannot reach it, and a page opened
    -- then says why it is empty. The toast and the view are emptied before each step, so that
    -- what is waited for is drawn by that step (the 503's toast is still up for 4 s, and the
    -- last page's error panel would stand for the next one's).
    session.go(base .. "/#/runs")
    session.wait("the runs", "return document.querySelector('#runs-body tr[data-run]') !== null", 15)
    session.js("document.querySelector('#toast').style.display = 'none'")
    B.stop(pid)
    H.wait_for("the server gone", function() return http_json("GET", base .. "/api/v1/runs") == nil end, 10)
    shown = session.wait("the refresh's failure", toast, 10)
    assert.are.equal("bad", shown[1])
    local failed = "var e = document.querySelector('#view .panel.err'); return e && e.textContent;"
    session.js("document.querySelector('#view').innerHTML = ''; location.hash = '#/dlq'")
    local err = session.wait("the dead letters' failure", failed, 10)
    assert.is_true(#err > 0)
    session.js("document.querySelector('#view').innerHTML = ''; location.hash = '#/run/" .. id .. "'")
    err = session.wait("the run's failure", failed, 10)
    assert.is_true(#err > 0)
  end)

  it_pg("shows a Retry answered 503 while another session holds the run's row, and retries once it is gone", function()
    local dir, db, id = dead_letter()
    local base, session = B.serve_and_browse(dir, db)
    local button = "document.querySelector('tr[data-run=\"" .. id .. "\"] button.retry')"
    session.go(base .. "/#/dlq")
    session.wait("the dead letter", "return " .. button .. " !== null", 15)
    P.hold(dir, db, ("SELECT id FROM runs WHERE id = '%s' FOR UPDATE"):format(id))
    session.js(button .. ".click()")
    local shown = session.wait("the refusal", toast, 15)
    assert.are.equal("bad", shown[1])
    assert.matches(id, shown[2])
    assert.are.equal("needs_attention", run_of(base, id).status)
    P.release()
    session.js("document.querySelector('#toast').style.display = 'none';" .. button .. ".click()")
    shown = session.wait("the retry", toast, 15)
    assert.are.same({ "", "run " .. id .. " retried" }, shown)
  end)
end)
