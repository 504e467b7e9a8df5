-- The HTTP API's query parameters and JSON bodies read one way everywhere: a count is digits
-- from its first byte (`limit` took " 5" where `tail` refused it), a parameter the endpoint
-- does not take or one given twice is refused naming it (both were ignored: a misspelt `limt`
-- or a second `limit` answered as if not given), and a body's key given twice is refused
-- (the last was taken). Each is 400, as docs/http-api.md says.
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"
local workspace, start, get, post = S.workspace, S.start, S.get, S.post
local json = mend.json

local function refused(base, path, code_name, pattern)
  local code, e, raw = get(base, path)
  assert.are.equal(400, code, path .. ": " .. tostring(raw))
  assert.are.equal(code_name, e.error.code, path)
  assert.matches(pattern, e.error.message, 1, false)
end

describe("the HTTP API's query parameters and bodies", function()
  after_each(S.cleanup)

  it("refuses a malformed count, an unknown parameter and a repeated one, naming it", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    assert.are.equal(201, code, json.encode(r))
    local history = "/api/v1/runs/" .. r.id .. "/history"
    -- what is right is answered
    assert.are.equal(200, (get(base, "/api/v1/runs?limit=5&status=running&workflow=hello")))
    assert.are.equal(200, (get(base, "/api/v1/runs?since=0.5")))
    assert.are.equal(200, (get(base, history .. "?tail=1")))
    assert.are.equal(200, (get(base, history .. "?after=0&limit=2")))
    assert.are.equal(200, (get(base, "/api/v1/runs/" .. r.id)))
    -- a count as tail reads it, for limit and since too
    for _, v in ipairs { "%205", "+5", "%2B5" } do
      refused(base, "/api/v1/runs?limit=" .. v, "bad_query", "^limit must be a whole number")
      refused(base, history .. "?tail=" .. v, "bad_query", "^tail must be a whole number")
      refused(base, "/api/v1/runs?since=" .. v, "bad_query", "^since must be a time")
    end
    refused(base, "/api/v1/runs?since=0x10", "bad_query", "^since must be a time")
    -- digits, a fraction after one '.', nothing else: no exponent, no inf
    -- and digits on both sides of it: docs/http-api.md's rule
    for _, v in ipairs { "1e3", "1E3", "inf", "1.2.3", ".", "5." .. "%20", ".5", "5." } do
      refused(base, "/api/v1/runs?since=" .. v, "bad_query", "^since must be a time")
    end
    refused(base, "/api/v1/runs/" .. r.id .. "?wait=.5", "bad_query", "^wait must be a number")
    assert.are.equal(200, (get(base, "/api/v1/runs?since=5.25")))
    refused(base, "/api/v1/runs/" .. r.id .. "?wait=1e1", "bad_query", "^wait must be a number")
    -- '+' is a space, as a form and URLSearchParams send it; "%2B" is a '+'
    refused(base, "/api/v1/runs?status=needs+attention", "bad_query", 'got "needs attention"$')
    refused(base, "/api/v1/runs?status=a%2Bb", "bad_query", 'got "a%+b"$')
    -- a parameter the endpoint does not take
    refused(base, "/api/v1/runs?limt=5", "bad_query",
            '^unknown query parameter "limt": GET /api/v1/runs takes status, workflow, since, limit, cursor$')
    refused(base, history .. "?tial=5", "bad_query", 'unknown query parameter "tial"')
    refused(base, "/api/v1/runs/" .. r.id .. "?limit=5", "bad_query",
            '^unknown query parameter "limit": GET /api/v1/runs/{id} takes wait$')
    refused(base, "/api/v1/runs/" .. r.id .. "/events?tail=5", "bad_query",
            '^unknown query parameter "tail": GET /api/v1/runs/{id}/events takes after, limit$')
    refused(base, "/api/v1/dlq?x", "bad_query", 'unknown query parameter "x"')
    code = post(base, "/api/v1/runs?dry_run=1", { workflow = "hello", input = { to = "y" } })
    assert.are.equal(400, code)
    -- one given twice, even with the same value, or spelt with an escape
    refused(base, "/api/v1/runs?limit=1&limit=2", "bad_query", "^the query parameter limit is given twice$")
    refused(base, history .. "?tail=1&tail=1", "bad_query", "^the query parameter tail is given twice$")
    refused(base, "/api/v1/runs?limit=1&l%69mit=2", "bad_query", "limit is given twice")
    -- a name spelt with an escape is the name
    assert.are.equal(200, (get(base, "/api/v1/runs?l%69mit=1")))
    assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  -- `?workflow=` (a client's filter variable left empty) listed every run, as if no filter
  -- had been asked for: an empty value filters nothing a client meant, so it is refused.
  it("refuses a parameter given without a value, naming it, on every route that takes any",
     function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    assert.are.equal(201, code, json.encode(r))
    local history = "/api/v1/runs/" .. r.id .. "/history"
    for _, p in ipairs { "workflow", "status", "since", "limit", "cursor" } do
      for _, q in ipairs { p .. "=", p } do
        refused(base, "/api/v1/runs?" .. q, "bad_query", "^" .. p .. " ")
        local other = p == "limit" and "status=running&" or "limit=5&"
        refused(base, "/api/v1/runs?" .. other .. q, "bad_query", "^" .. p .. " ")
      end
    end
    refused(base, "/api/v1/runs?workflow=", "bad_query", "^workflow is empty")
    for _, p in ipairs { "after", "limit", "tail" } do
      refused(base, history .. "?" .. p .. "=", "bad_query", "^" .. p .. " ")
    end
    -- the list routes without a parameter take none: each refuses one, empty or not
    for _, path in ipairs { "/api/v1/breakers", "/api/v1/workflows", "/api/v1/workflows/hello" } do
      refused(base, path .. "?workflow=", "bad_query", '^unknown query parameter "workflow"')
      refused(base, path .. "?limit=5", "bad_query", '^unknown query parameter "limit"')
    end
    -- the paged lists take after and limit, and nothing else
    for _, path in ipairs { "/api/v1/dlq", "/api/v1/runs/" .. r.id .. "/events" } do
      refused(base, path .. "?workflow=", "bad_query", '^unknown query parameter "workflow"')
      for _, p in ipairs { "after", "limit" } do
        refused(base, path .. "?" .. p .. "=", "bad_query", "^" .. p .. " ")
      end
    end
    -- a filter given is a filter
    code, r = get(base, "/api/v1/runs?workflow=refund")
    assert.are.equal(200, code)
    assert.are.same({}, r.runs)
  end)

  -- A run id left empty in a client's path template ("/api/v1/runs/" .. id .. "/events") took
  -- another route: GET /api/v1/runs/ listed every run, GET /api/v1/runs//history read run
  -- "history", and POST /api/v1/runs//events was 405, "this endpoint takes GET".
  it("answers a path with an empty segment 404, naming the path, never another route", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    assert.are.equal(201, code, json.encode(r))
    local function none(path, body)
      local c, e, raw
      if body then c, e, raw = post(base, path, body) else c, e, raw = get(base, path) end
      assert.are.equal(404, c, path .. ": " .. tostring(raw))
      assert.are.equal("not_found", e.error.code, path)
      assert.matches("no such endpoint: " .. path:gsub("%p", "%%%0") .. " %(a segment is empty", e.error.message)
    end
    none("/api/v1/runs/")
    none("/api/v1/runs//history")
    none("/api/v1/runs//events")
    none("/api/v1/runs//events", { name = "x" })
    none("/api/v1/runs//cancel", {})
    none("/api/v1/dlq//retry", {})
    none("/api/v1/breakers//open", {})
    none("/api/v1/workflows/")
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox"))
    assert.are.equal("running", S.status_of(base, r.id))
    -- the paths themselves are served
    assert.are.equal(200, (get(base, "/api/v1/runs")))
    assert.are.equal(200, (get(base, "/api/v1/runs/" .. r.id .. "/history")))
    assert.are.equal(200, (get(base, "/api/v1")))
  end)

  it("refuses a body whose key is given twice, naming the key", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "workflow": "nope"}')
    assert.are.equal(400, code)
    assert.are.equal("bad_json", e.error.code)
    assert.matches('gives a key twice: .*"workflow"', e.error.message)
    code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "input": {"to": "a", "to": "b"}}')
    assert.are.equal(400, code)
    assert.matches('gives a key twice: .*"to"', e.error.message)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs"))
  end)

  -- What a client can send that is not UTF-8: a JSON body cannot hold it (jansson refuses a
  -- lone surrogate's escape, as it refuses \u0000), a percent-escape in the path can. The
  -- engine refuses such a text where it enters (a store keeps only UTF-8: PostgreSQL refused
  -- the batch, and the engine stopped), 400 naming it, and the server goes on.
  it("refuses a text that is not UTF-8, in the path or the body, naming it, and goes on", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, e = post(base, "/api/v1/runs/%FF/events", { name = "go" })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("bad_request", e.error.code)
    assert.matches("the run id is not UTF-8 text", e.error.message, 1, true)
    code, e = post(base, "/api/v1/breakers/psp%C0/reset", {})
    assert.are.equal(400, code, json.encode(e))
    assert.matches("the breaker's key is not UTF-8 text", e.error.message, 1, true)
    code, e = post(base, "/api/v1/events", '{"run_key": "k\\udcff", "name": "go"}')
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("bad_json", e.error.code)
    code, e = post(base, "/api/v1/runs", '{"workflow": "hello", "key": "k\\u0000"}')
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("bad_json", e.error.code)
    local r
    code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" } })
    assert.are.equal(201, code, json.encode(r))
    assert.are.equal(200, (get(base, "/api/v1/runs/" .. r.id)))
  end)

  -- A misspelt field ("imput") was ignored: the run started with no input, the event went
  -- without its data, a breaker opened for its policy's time.
  it("refuses a body field the endpoint does not take, naming it and what it takes", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, e = post(base, "/api/v1/runs", { workflow = "hello", imput = { to = "x" } })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.are.equal('unknown field "imput": POST /api/v1/runs takes workflow, input, key',
                     e.error.message)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM runs"))
    local r
    code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" }, key = "k" })
    assert.are.equal(201, code, json.encode(r))
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/events", { name = "x", payload = 1 })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.are.equal('unknown field "payload": POST /api/v1/runs/{id}/events takes name, data, key',
                     e.error.message)
    code, e = post(base, "/api/v1/events", { run_key = "k", name = "x", run = r.id })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.matches('^unknown field "run": POST /api/v1/events takes run_key, name, data, key$',
                   e.error.message)
    code, e = post(base, "/api/v1/dlq/" .. r.id .. "/resolve", { notes = "done" })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.matches('^unknown field "notes"', e.error.message)
    code, e = post(base, "/api/v1/breakers/hello/open", { secs = 5 })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.matches('^unknown field "secs": POST /api/v1/breakers/{key}/open takes seconds$',
                   e.error.message)
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox"))
    -- a cancel and a retry take none (who did it is X-Mend-Who)
    code, e = post(base, "/api/v1/runs/" .. r.id .. "/cancel", { who = "alice" })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.are.equal('unknown field "who": POST /api/v1/runs/{id}/cancel takes no field',
                     e.error.message)
    code, e = post(base, "/api/v1/dlq/" .. r.id .. "/retry", { who = "alice" })
    assert.are.equal(400, code, json.encode(e))
    assert.are.equal("unknown_field", e.error.code)
    assert.matches('^unknown field "who"', e.error.message)
    assert.are.equal("running", S.status_of(base, r.id))
    code = post(base, "/api/v1/runs/" .. r.id .. "/cancel", "{}")
    assert.are.equal(202, code)
  end)

  -- A client tells a field the route does not take (unknown_field) from a field it takes with
  -- a value it refuses (bad_field) by the code alone, on every route that takes a body.
  it("tells an unknown field from a bad value by its code, on every route", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "hello", input = { to = "x" }, key = "k" })
    assert.are.equal(201, code, json.encode(r))
    local function says(want, path, body, pattern)
      local c, e, raw = post(base, path, body)
      assert.are.equal(400, c, path .. ": " .. tostring(raw))
      assert.are.equal(want, e.error.code, path .. ": " .. tostring(raw))
      assert.matches(pattern, e.error.message, 1, false)
    end
    local id = "/api/v1/runs/" .. r.id
    -- bad values: a field the route takes
    says("bad_field", "/api/v1/runs", { workflow = 5 }, '^"workflow" must be a non%-empty string$')
    says("bad_field", "/api/v1/runs", { workflow = "" }, '"workflow"')
    says("bad_field", "/api/v1/runs", { workflow = "hello", key = { 1 } }, '"key"')
    says("bad_field", id .. "/events", { name = true }, '"name"')
    says("bad_field", id .. "/events", { name = "x", key = 7 }, '"key"')
    says("bad_field", "/api/v1/events", { run_key = 1, name = "x" }, '"run_key"')
    says("bad_field", "/api/v1/dlq/" .. r.id .. "/resolve", { note = "" }, '"note"')
    says("bad_field", "/api/v1/breakers/psp/open", { seconds = -1 }, '^"seconds" must be a number > 0')
    says("bad_field", "/api/v1/breakers/psp/open", { seconds = "5" }, '"seconds"')
    -- unknown fields, each named
    says("unknown_field", "/api/v1/runs", { workflow = "hello", imput = 1 }, '"imput"')
    says("unknown_field", id .. "/events", { name = "x", payload = 1 }, '"payload"')
    says("unknown_field", "/api/v1/events", { run_key = "k", name = "x", run = 1 }, '"run"')
    says("unknown_field", id .. "/cancel", { why = "x" }, '"why"')
    says("unknown_field", "/api/v1/dlq/" .. r.id .. "/retry", { x = 1 }, '"x"')
    says("unknown_field", "/api/v1/dlq/" .. r.id .. "/resolve", { note = "n", by = "me" }, '"by"')
    says("unknown_field", "/api/v1/breakers/psp/open", { secs = 5 }, '"secs"')
    -- close and reset take no seconds: a field of open, not theirs
    says("unknown_field", "/api/v1/breakers/psp/close", { seconds = 5 },
         '^unknown field "seconds": POST /api/v1/breakers/{key}/close takes no field')
    says("unknown_field", "/api/v1/breakers/psp/reset", { seconds = 5 }, '"seconds"')
    assert.are.equal("running", S.status_of(base, r.id))
    assert.are.same({ "0" }, H.sql(db, "SELECT count(*) FROM inbox"))
  end)

  -- A client switches on the code: each one the server can answer is in docs/http-api.md's
  -- table, with its status, and the table names none it never sends.
  it("sends only the error codes docs/http-api.md's table lists, each with its status", function()
    local root = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."
    local documented = {}
    for line in io.lines(root .. "/docs/http-api.md") do
      local status, codes = line:match("^| (%d%d%d) | (`[^|]*) |")
      if status then
        for c in codes:gmatch("`([%w_]+)`") do documented[c] = tonumber(status) end
      end
    end
    local sent = {}
    local p = assert(io.popen("ls " .. H.quote(root) .. "/src/serve/*.c"))
    for file in p:lines() do
      local text = H.read(file)
      for status, c in text:gmatch('serve_error%([^,]+, (%d+), "([%w_]+)"') do sent[c] = tonumber(status) end
      for c in text:gmatch('\\"code\\":\\"([%w_]+)\\"') do sent[c] = sent[c] or true end
    end
    p:close()
    -- an answer to a request whose connection is already shut, as the server stops: never read
    sent.stopping = nil
    assert.is_true(next(sent) ~= nil and sent.unknown_field == 400, "no codes found in src/serve")
    for c, status in pairs(sent) do
      assert.truthy(documented[c], "docs/http-api.md's table lacks the code " .. c)
      if status ~= true then assert.are.equal(status, documented[c], c) end
    end
    for c in pairs(documented) do assert.truthy(sent[c], "docs/http-api.md lists " .. c .. ", never sent") end
  end)

  it("lets a scrape of /metrics add parameters of its own", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, _, raw = get(base, "/metrics?format=prometheus&job=mend")
    assert.are.equal(200, code, tostring(raw))
    assert.matches("mend_runs_by_status", raw, 1, true)
  end)
end)
