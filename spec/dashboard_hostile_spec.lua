-- The dashboard against what it must never trust, from docs/http-api.md ("The dashboard"):
-- headless chromium (spec/support/browser.lua) on a real `mend serve`. A Link header (from a
-- proxy in front of mend, or a server gone wrong) that points off the page's own server must
-- never be followed (the bearer token goes with each request), nor one that leads round a
-- loop; a dead-letter queue of 10,000 must be listed and the page stay usable; and should any
-- text get past the page's escaping, its Content-Security-Policy must refuse to run it (no
-- inline script but the page's own, no event handler attribute).
local H = require "spec.helper"
local B = require "spec.support.browser"

local json = require("mend").json

local function workspace(dead_letters)
  local dir = H.tmp_dir()
  local db = H.new_db(dir, "dash.db")
  H.close(H.new_engine({ db = db, clock = "virtual" }))   -- the schema, made by mend
  H.sql(db, ([[WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d)
    INSERT INTO dlq(run_id, reason, step, error, detail, at)
    SELECT 'd' || (100000 + i), 'compensation_failed', 's', 'e' || i, NULL, 1000 + i FROM n]]):format(dead_letters))
  return dir, db
end

-- The page's fetch, wrapped: every URL it asks for is kept in window.__asked, and the dead
-- letters' answers carry the Link header window.__link instead of the server's.
local LINKED = [[
  window.__asked = []; window.__link = '';
  var real = window.fetch;
  window.fetch = function (url, opts) {
    window.__asked.push(new URL(String(url), location.href).href);
    var p = real(url, opts);
    if (String(url).indexOf('/api/v1/dlq') < 0) return p;
    return p.then(function (res) { return res.text().then(function (t) {
      return new Response(t, { status: res.status, headers: { 'Content-Type': 'application/json', 'Link': window.__link } }); }); });
  };]]

local DRAWN_OR_SAID = [[
  var e = document.querySelector('#view .err'), h = document.querySelector('#view h2');
  return (e && ['error', e.textContent]) || (h && h.textContent === 'Dead letters' && ['drawn', document.querySelectorAll('tr[data-run]').length]);]]

describe("the dashboard against hostile answers, in chromium", function()
  after_each(function() B.stop_all() H.cleanup() end)
  teardown(function() B.stop_browser() end)

  -- #sqlite: the page's own doing with what it is answered (a Link made in the page, text it
  -- is given), whatever store the server reads; the queue of 10,000 is read on both stores.

  it("follows no Link off its own server #sqlite", function()
    local dir, db = workspace(3)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/breakers")
    session.wait("the breakers", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Breakers'", 15)
    session.js(LINKED)
    for _, link in ipairs { "<http://mend.example/api/v1/dlq?after=d100003>; rel=\"next\"",
                            "<//mend.example/api/v1/dlq?after=d100003>; rel=\"next\"" } do
      session.js("window.__asked = []; window.__link = " .. json.encode(link) .. "; location.hash = '#/dlq'")
      local shown = session.wait("the dead letters", DRAWN_OR_SAID, 10)
      local asked = session.js("return window.__asked")
      for _, url in ipairs(asked) do
        assert.are.equal(base .. "/", url:sub(1, #base + 1), "asked off its server: " .. url)
      end
      assert.are.equal("error", shown[1])
      assert.matches("mend.example", shown[2])
      session.js("location.hash = '#/breakers'")
    end
  end)

  it("follows no Link round a loop #sqlite", function()
    local dir, db = workspace(3)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/breakers")
    session.wait("the breakers", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Breakers'", 15)
    session.js(LINKED)
    -- A next page that is the page itself, and one that comes back to the first.
    for _, link in ipairs { "</api/v1/dlq>; rel=\"next\"", "</api/v1/dlq?limit=1000>; rel=\"next\"" } do
      session.js("window.__asked = []; window.__link = " .. json.encode(link) .. "; location.hash = '#/dlq'")
      local ok, shown = pcall(session.wait, "the dead letters", DRAWN_OR_SAID, 5)
      local asked = #session.js("return window.__asked")
      assert.is_true(ok, "nothing drawn nor said after " .. asked .. " requests")
      assert.are.equal("error", shown[1])
      assert.is_true(asked <= 3, asked .. " requests")
      session.js("location.hash = '#/breakers'")
    end
  end)

  it("lists a queue of 10,000 newest first, a part at a time, and leaves it be when it did not change", function()
    local dir, db = workspace(10000)
    local base, session = B.serve_and_browse(dir, db)
    session.go(base .. "/#/dlq")
    local shown = session.wait("the dead letters", [[var c = document.querySelector('#dlq-count');
      return c && [c.textContent, document.querySelectorAll('tr[data-run]').length, document.querySelector('#dlq-note').textContent];]], 30)
    assert.are.same({ "10000", 500, "the newest 500 of 10000 shown" }, shown)
    -- the newest first: the last of the API's pages
    assert.are.equal("d110000", session.js("return document.querySelector('tr[data-run]').dataset.run"))
    -- A refresh (every 5 s) of a queue that stayed as it was draws nothing anew: the rows the
    -- person has (and the part they scrolled to) stay, and so do the older ones they asked for.
    session.js("document.querySelector('#dlq-more').click(); document.querySelector('tr[data-run]').__kept = true;")
    assert.are.same({ 1000, "d109001" }, session.js([[var trs = document.querySelectorAll('tr[data-run]');
      return [trs.length, trs[trs.length - 1].dataset.run];]]))
    session.js([[window.__dlq = 0; var real = window.fetch; window.fetch = function (url, opts) {
      if (String(url).indexOf('/api/v1/dlq') >= 0) window.__dlq++; return real(url, opts); };]])
    session.wait("a refresh of its ten pages", "return window.__dlq >= 10", 10)
    os.execute("sleep 1")
    assert.are.same({ true, 1000 }, session.js("return [document.querySelector('tr[data-run]').__kept === true, document.querySelectorAll('tr[data-run]').length]"))
  end)

  it("runs no script but its own, should text get past its escaping #sqlite", function()
    local dir, db = workspace(0)
    local base, session = B.serve_and_browse(dir, db)
    local head = os.tmpname()
    assert.are.equal(0, H.shell("curl -s -o /dev/null -D " .. H.quote(head) .. " " .. H.quote(base .. "/")))
    local csp = H.read(head):match("[Cc]ontent%-[Ss]ecurity%-[Pp]olicy: ([^\r\n]*)")
    os.remove(head)
    assert.matches("^'sha256%-[%w+/]+=*'$", csp:match("script%-src ([^;]*)"))
    session.go(base .. "/#/runs")
    session.wait("the runs", "return document.querySelector('#runs-note').textContent !== ''", 15)
    -- What the page's escaping would have let through, were it wrong: an inline script, an
    -- event handler attribute, a javascript: link.
    session.js([[window.__refused = [];
      document.addEventListener('securitypolicyviolation', function (e) { window.__refused.push(e.effectiveDirective); });
      var s = document.createElement('script'); s.textContent = "window.__ran = 'script'"; document.body.appendChild(s);
      document.querySelector('#view').insertAdjacentHTML('beforeend',
        '<img src="data:," onerror="window.__ran = \'handler\'"><a id="js" href="javascript:void(window.__ran = \'link\')">x</a>');
      document.querySelector('#js').click();]])
    local refused = session.wait("the refusals", "return window.__refused.length >= 3 && window.__refused", 10)
    for _, directive in ipairs(refused) do assert.matches("^script%-src", directive) end
    os.execute("sleep 0.5")
    assert.are.equal("none", session.js("return window.__ran === undefined ? 'none' : window.__ran"))
    -- and the page's own script still draws it
    session.js("location.hash = '#/breakers'")
    session.wait("the breakers", "var h = document.querySelector('#view h2'); return h && h.textContent === 'Breakers'", 10)
  end)
end)
