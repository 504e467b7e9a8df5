-- mend.http against a real HTTP server on 127.0.0.1 (tests/http_server.py, scripted per path):
-- what each status and transport failure means for the step, Retry-After, the idempotency
-- header, limits, the host allow-list, the history detail, and many requests on one loop.
local mend = require "mend"
local H = require "spec.helper"

local server = {}

-- Starts the server (tests/http_server.py) on `script` and `log`, over TLS with `tls`
-- ({cert, key}), its stderr to the file `errors` if given; returns its port, pid and the pipe
-- it printed them on.
local function spawn(script_path, log_path, tls, errors)
  local extra = (tls and (" " .. tls.cert .. " " .. tls.key) or "")
                .. (errors and (" 2>" .. errors) or "")
  local p = assert(io.popen("python3 tests/http_server.py " .. script_path .. " " .. log_path
                            .. extra .. " & echo", "r"))
  local line = p:read("l")
  while line == "" do line = p:read("l") end
  local port, pid = tostring(line):match("^(%d+) (%d+)$")
  assert(port, "the test server did not start: " .. tostring(line))
  return tonumber(port), tonumber(pid), p
end

-- Starts the server once for the file; script(tbl) rewrites what it answers.
local function start_server()
  -- not H.tmp_dir(): that is removed after each test, and the server outlives them
  server.script_path = os.tmpname()
  server.log_path = os.tmpname()
  server.port, server.pid, server.pipe = spawn(server.script_path, server.log_path)
  server.base = "http://127.0.0.1:" .. server.port
end

local function script(tbl)
  local f = assert(io.open(server.script_path, "w"))
  f:write(mend.json.encode(tbl))
  f:close()
  f = assert(io.open(server.log_path, "w"))
  f:close()
end

-- The requests the server saw, in order.
local function seen(path)
  local out = {}
  for line in io.lines(server.log_path) do
    local r = mend.json.decode(line)
    if not path or r.path == path then out[#out + 1] = r end
  end
  return out
end

-- A free port with nothing listening: bound and closed by python.
local function closed_port()
  local p = assert(io.popen("python3 -c 'import socket; s=socket.socket(); "
                            .. "s.bind((\"127.0.0.1\",0)); print(s.getsockname()[1]); s.close()'"))
  local port = p:read("n")
  p:close()
  return port
end

-- Runs one step calling mend.http(call(ctx)) with `retry`; returns the engine, run id, the
-- values the step returned or raised, and the box of what it saw.
local function run_http(call, retry, opts, extra)
  local eng = H.new_engine(opts)
  local box = {}
  local step = {
    retry = retry or { max_attempts = 3, initial = 1, jitter = 0 },
    execute = function(ctx)
      local res = mend.http(call(ctx))
      box.res = res
      return { status = res.status, body = res.body }
    end,
  }
  for k, v in pairs(extra or {}) do step[k] = v end
  eng:register(H.one_step("h", step))
  local id = eng:start("h", {})
  eng:run()
  return eng, id, box
end

describe("mend.http", function()
  setup(start_server)
  teardown(function()
    if server.pid then os.execute("kill " .. server.pid) end
    if server.pipe then server.pipe:close() end
    os.remove(server.script_path)
    os.remove(server.log_path)
  end)
  after_each(H.cleanup)

  it("returns status, headers, body and decoded json of a 200", function()
    script({ ["/ok"] = { { status = 200, headers = { ["Content-Type"] = "application/json",
                                                    ["X-Thing"] = "a",
                                                    ["X-Twice"] = { "one", "two" } },
                           body = '{"n": 3}' } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/ok" } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(200, box.res.status)
    assert.are.equal(3, box.res.json.n)
    assert.are.equal("a", box.res.headers["x-thing"])
    assert.are.equal("one, two", box.res.headers["x-twice"])   -- a repeated header, joined
    assert.are.equal('{"n": 3}', box.res.body)
    -- the history row of the outcome names the request
    local ok = H.events(eng, id, { event = "step", to = "succeeded" })[1]
    assert.matches("^GET http://127.0.0.1:%d+/ok %-> 200 %(%d+%.%d%d%d s%)$", ok.detail)
  end)

  -- headers and json are made when the step first reads them (src/engine/http_resp.c): each
  -- way a step can come at them must see what a table holding them from the start showed.
  local function json_answer()
    script({ ["/j"] = { { status = 200, headers = { ["Content-Type"] = "application/json",
                                                   ["X-Twice"] = { "one", "two" } },
                          body = '{"n": 3}' } } })
    return server.base .. "/j"
  end

  it("gives the same headers and json whichever the step reads first", function()
    local url = json_answer()
    local eng = H.new_engine()
    local seen_by = {}
    eng:register(H.one_step("h", { execute = function()
      local a = mend.http{ url = url }
      seen_by.type_first = { a.headers["content-type"], a.json and a.json.n, a.headers }
      local b = mend.http{ url = url }
      seen_by.json_first = { b.json and b.json.n, b.headers["content-type"], b.headers }
      return true
    end }))
    local id = eng:start("h", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local t, j = seen_by.type_first, seen_by.json_first
    assert.are.equal("application/json", t[1])
    assert.are.equal(3, t[2])
    assert.are.equal(3, j[1])
    assert.are.equal("application/json", j[2])
    for _, h in ipairs({ t[3], j[3] }) do
      assert.are.equal("one, two", h["x-twice"])
      assert.are.equal("8", h["content-length"])
      assert.is_string(h.date)
      assert.is_nil(h["Content-Type"])   -- by lower-case name only
    end
  end)

  it("has no json for a body that is not JSON or does not decode", function()
    script({ ["/text"] = { { status = 200, headers = { ["Content-Type"] = "text/plain" },
                             body = '{"n": 3}' } },
             ["/bad"] = { { status = 200, headers = { ["Content-Type"] = "application/json" },
                            body = "{not json" } } })
    local got = {}
    local eng = H.new_engine()
    eng:register(H.one_step("h", { execute = function()
      for _, path in ipairs({ "/text", "/bad" }) do
        local r = mend.http{ url = server.base .. path }
        local keys = {}
        for k in pairs(r) do keys[#keys + 1] = k end
        table.sort(keys)
        got[path] = { json = r.json, keys = table.concat(keys, " ") }
      end
      return true
    end }))
    local id = eng:start("h", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ keys = "body headers status" }, got["/text"])
    assert.are.same({ keys = "body headers status" }, got["/bad"])
  end)

  it("walks status, headers, body and json with pairs", function()
    local url = json_answer()
    local fields
    local eng = H.new_engine()
    eng:register(H.one_step("h", { execute = function()
      fields = {}
      for k, v in pairs(mend.http{ url = url }) do fields[k] = v end
      return true
    end }))
    local id = eng:start("h", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "body", "headers", "json", "status" },
                    (function() local k = {} for n in pairs(fields) do k[#k + 1] = n end
                      table.sort(k) return k end)())
    assert.are.equal(200, fields.status)
    assert.are.equal('{"n": 3}', fields.body)
    assert.are.equal(3, fields.json.n)
    assert.are.equal("application/json", fields.headers["content-type"])
  end)

  it("stores a returned response whole as the step's result, and encodes it whole", function()
    local url = json_answer()
    local text
    local eng = H.new_engine()
    eng:register({ name = "h", steps = {
      { name = "call", execute = function()
          text = mend.json.encode(mend.http{ url = url })
          return mend.http{ url = url }
        end },
      { name = "nested", execute = function() return { r = mend.http{ url = url } } end },
      { name = "after", execute = function(ctx)
          return { ctype = ctx.results.call.headers["content-type"], n = ctx.results.call.json.n }
        end } } })
    local id = eng:start("h", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    for _, res in ipairs({ H.step(st, "call").result, H.step(st, "nested").result.r,
                           mend.json.decode(text) }) do
      assert.are.equal(200, res.status)
      assert.are.equal('{"n": 3}', res.body)
      assert.are.same({ n = 3 }, res.json)
      assert.are.equal("application/json", res.headers["content-type"])
      assert.are.equal("one, two", res.headers["x-twice"])
    end
    assert.are.same({ ctype = "application/json", n = 3 }, H.step(st, "after").result)
  end)

  it("keeps what the step put in place of headers or json before reading them", function()
    local url = json_answer()
    local got = {}
    local eng = H.new_engine()
    eng:register(H.one_step("h", { execute = function()
      local r = mend.http{ url = url }
      r.json = nil                 -- dropped unread: stays dropped
      r.headers = { mine = "yes" }
      r.body = "changed"
      r.extra = 1
      got.json, got.headers = r.json, r.headers
      got.keys = {}
      for k in pairs(r) do got.keys[#got.keys + 1] = k end
      table.sort(got.keys)
      local s = mend.http{ url = url }
      s.body = "not json"          -- json is what the answer's body was
      got.later_json = s.json
      local t = mend.http{ url = url }
      rawset(t, "json", { mine = true })   -- set raw: pairs and encoding keep them too
      rawset(t, "headers", "mine")
      for _ in pairs(t) do end
      got.raw = { json = t.json, headers = t.headers, text = mend.json.encode(t) }
      return r
    end }))
    local id = eng:start("h", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status)
    assert.is_nil(got.json)
    assert.are.same({ mine = "yes" }, got.headers)
    assert.are.same({ "body", "extra", "headers", "status" }, got.keys)
    assert.are.same({ n = 3 }, got.later_json)
    assert.are.same({ mine = true }, got.raw.json)
    assert.are.equal("mine", got.raw.headers)
    assert.are.same({ status = 200, body = '{"n": 3}', json = { mine = true }, headers = "mine" },
                    mend.json.decode(got.raw.text))
    assert.are.same({ status = 200, body = "changed", headers = { mine = "yes" }, extra = 1 },
                    H.step(st, "work").result)
  end)

  it("keeps the responses' shared metatable out of a step's reach", function()
    local url = json_answer()
    local got = {}
    local eng = H.new_engine()
    eng:register(H.one_step("h", { execute = function()
      local r = mend.http{ url = url }
      got.mt = getmetatable(r)
      got.set = pcall(setmetatable, r, {})
      got.n = r.json.n
      got.after = getmetatable(r)   -- headers not read yet: still protected
      local _ = r.headers
      got.plain = getmetatable(r)   -- both made: a plain table
      return true
    end }))
    local id = eng:start("h", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ mt = false, set = false, n = 3, after = false }, got)
  end)

  it("makes json inside the step, under its memory limit, and only when the step reads it", function()
    -- a body of 2 MB whose decoded array takes 16 MB: over the limit only once decoded
    script({ ["/big"] = { { status = 200, headers = { ["Content-Type"] = "application/json" },
                            body = "[" .. string.rep("1,", 1 << 20) .. "1]" } } })
    local dir = H.tmp_dir()
    local file = H.write_file(dir, "big.lua", [[
      local mend = require "mend"
      return { name = "big", steps = { { name = "s", execute = function(ctx)
        local r = mend.http{ url = ctx.input.url }
        if ctx.input.read then return #r.json end
        return r.status
      end } } }]])
    local eng = H.new_engine({ memory_limit = 1 << 23 })
    eng:load(file)
    local unread = eng:start("big", { url = server.base .. "/big" })
    local read = eng:start("big", { url = server.base .. "/big", read = true })
    eng:run()
    assert.are.equal("succeeded", eng:status(unread).status)
    assert.are.equal(200, H.step(eng:status(unread), "s").result)
    local st = eng:status(read)
    assert.are_not.equal("succeeded", st.status)
    assert.matches("memory limit", H.step(st, "s").error, 1, true)
  end)

  -- The encoder completes the response in a protected call of its own: the limit's refusal
  -- came out of it as a plain error ("cannot complete a table: not enough memory"), a failure
  -- retried as any other, not the limit that stopped the step.
  for _, how in ipairs { "encode", "http" } do
    it("stops a step whose " .. how .. " of a response runs out of its memory limit", function()
      script({ ["/big"] = { { status = 200, headers = { ["Content-Type"] = "application/json" },
                              body = "[" .. string.rep("1,", 1 << 20) .. "1]" } },
               ["/sink"] = { { status = 200 } } })
      local dir = H.tmp_dir()
      local file = H.write_file(dir, "fill.lua", [[
        local mend = require "mend"
        return { name = "fill", retry = { max_attempts = 3 }, steps = { { name = "s",
          execute = function(ctx)
            local r = mend.http{ url = ctx.input.url .. "/big" }
            if ctx.input.how == "encode" then return #mend.json.encode(r) end
            return mend.http{ url = ctx.input.url .. "/sink", method = "POST", json = r }.status
          end } } }]])
      local eng = H.new_engine({ memory_limit = 1 << 23 })
      eng:load(file)
      local id = eng:start("fill", { url = server.base, how = how })
      eng:run()
      local st = eng:status(id)
      assert.are.equal("needs_attention", st.status)
      assert.are.equal("workflow_error", st.reason)
      assert.are.equal(1, H.step(st, "s").attempts)
      assert.matches("step exceeded the memory limit", H.step(st, "s").error, 1, true)
    end)
  end

  it("reads Retry-After whatever its case, and the last one when it comes twice", function()
    script({ ["/ra"] = { { status = 503, headers = { ["RETRY-AFTER"] = "2" } },
                         { status = 429, headers = { ["Retry-After"] = { "9", "4" } } },
                         { status = 200 } } })
    local eng, id = run_http(function() return { url = server.base .. "/ra" } end,
      { max_attempts = 3, initial = 100, jitter = 0 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ 2, 4 }, H.retry_delays(eng, id, "work"))
  end)

  it("takes a Retry-After of digits only: 1e3 and 0x10 are no delay-seconds, the backoff stands",
     function()
    script({ ["/odd"] = { { status = 503, headers = { ["Retry-After"] = "1e3" } },
                          { status = 503, headers = { ["Retry-After"] = "0x10" } },
                          { status = 503, headers = { ["Retry-After"] = " 2.5 " } },
                          { status = 503, headers = { ["Retry-After"] = "3\t" } },   -- OWS
                          { status = 200 } } })
    local eng, id = run_http(function() return { url = server.base .. "/odd" } end,
      { max_attempts = 5, initial = 1, multiplier = 1, jitter = 0 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ 1, 1, 2.5, 3 }, H.retry_delays(eng, id, "work"))
  end)

  it("returns a response raise = false keeps, with its headers, whatever its status", function()
    script({ ["/busy"] = { { status = 503, headers = { ["Retry-After"] = "5",
                                                      ["Content-Type"] = "application/json" },
                             body = '{"busy": true}' } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/busy", raise = false } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(503, box.res.status)
    assert.are.equal("5", box.res.headers["retry-after"])
    assert.are.same({ busy = true }, box.res.json)
  end)

  it("offers compression only when the call asks, and then gives the body decoded", function()
    script({ ["/plain"] = { { status = 200, body = "plain" } },
             ["/gz"] = { { status = 200, body = "squeezed squeezed squeezed", gzip = true } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/plain" } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(mend.json.null, seen("/plain")[1].accept_encoding)   -- no such header
    eng, id, box = run_http(function()
      return { url = server.base .. "/gz", headers = { ["Accept-Encoding"] = "gzip" } }
    end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("gzip", seen("/gz")[1].accept_encoding)
    assert.are.equal("squeezed squeezed squeezed", box.res.body)
    assert.are.equal("gzip", box.res.headers["content-encoding"])
  end)

  it("waits exactly Retry-After seconds after a 429, not the backoff", function()
    script({ ["/rl"] = { { status = 429, headers = { ["Retry-After"] = "3" }, body = "slow down" },
                         { status = 200, body = "done" } } })
    local eng, id = run_http(function() return { method = "POST", url = server.base .. "/rl" } end,
      { max_attempts = 3, initial = 100, jitter = 0 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ 3 }, H.retry_delays(eng, id, "work"))
    local rw = H.events(eng, id, { event = "step", to = "retry_wait" })[1]
    assert.matches("POST http://127.0.0.1:%d+/rl %-> 429", rw.detail)
    assert.matches("HTTP 429", rw.error)
  end)

  it("reads Retry-After as an HTTP date against the engine's clock", function()
    local eng = H.new_engine()
    local at = math.floor(eng:now()) + 10
    -- (the second without its weekday, which curl's date reader takes: it begins with a digit)
    script({ ["/date"] = { { status = 503, headers = {
                               ["Retry-After"] = os.date("!%a, %d %b %Y %H:%M:%S GMT", at) } },
                           { status = 503, headers = {
                               ["Retry-After"] = os.date("!%d %b %Y %H:%M:%S GMT", at + 20) } },
                           { status = 200 } } })
    eng:register(H.one_step("h", {
      retry = { max_attempts = 3, initial = 100, jitter = 0 },
      execute = function() return mend.http{ url = server.base .. "/date" }.status end,
    }))
    local id = eng:start("h", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local d = H.retry_delays(eng, id, "work")
    assert.is_true(d[1] > 8.9 and d[1] <= 10, "delay " .. tostring(d[1]))
    assert.is_true(d[2] > 19.8 and d[2] <= 20, "delay " .. tostring(d[2]))
  end)

  it("clamps a Retry-After above max_retry_after", function()
    script({ ["/long"] = { { status = 429, headers = { ["Retry-After"] = "3600" } },
                           { status = 200 } } })
    local eng, id = run_http(function() return { url = server.base .. "/long" } end,
      { max_attempts = 3, initial = 1, jitter = 0, max_retry_after = 7 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ 7 }, H.retry_delays(eng, id, "work"))
  end)

  it("retries a 503 and takes the 200 that follows, with the same Idempotency-Key", function()
    script({ ["/pay"] = { { status = 503 }, { status = 503 }, { status = 200, body = "paid" } } })
    local eng, id, box = run_http(function()
      return { method = "POST", url = server.base .. "/pay", json = { amount = 5 } }
    end, { max_attempts = 5, initial = 1, jitter = 0 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("paid", box.res.body)
    local reqs = seen("/pay")
    assert.are.equal(3, #reqs)
    assert.are.equal(id .. "/work", reqs[1].idempotency_key)
    for _, r in ipairs(reqs) do assert.are.equal(reqs[1].idempotency_key, r.idempotency_key) end
    assert.are.equal('{"amount":5}', reqs[1].body)
  end)

  it("sends the same Idempotency-Key after a restart", function()
    script({ ["/again"] = { { status = 503, headers = { ["Retry-After"] = "600" } },
                            { status = 200, body = "done" } } })
    local def = H.one_step("again", { retry = { max_attempts = 3, initial = 1, jitter = 0 },
      execute = function() return mend.http{ method = "POST", url = server.base .. "/again" }.body end })
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("again", {})
    -- the first attempt's answer comes back in real time: step the virtual clock by nothing
    for _ = 1, 200 do
      eng:advance(0)
      if H.step(eng:status(id), "work").status == "retry_wait" then break end
      os.execute("sleep 0.02")
    end
    assert.are.equal("retry_wait", H.step(eng:status(id), "work").status)
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.equal("succeeded", eng2:status(id).status)
    local reqs = seen("/again")
    assert.are.equal(2, #reqs)
    assert.are.equal(id .. "/work", reqs[2].idempotency_key)
    assert.are.equal(reqs[1].idempotency_key, reqs[2].idempotency_key)
  end)

  -- An undo is another effect than its do: a service that keeps idempotency keys across its
  -- endpoints (as Stripe does) would take a refund sent with its charge's key for a repeat of
  -- the charge, and answer with the charge, refunding nothing.
  it("sends a compensation's requests a key of their own, the same on its retries and after a restart", function()
    script({ ["/charge"] = { { status = 200, body = "charged" } },
             ["/refund"] = { { status = 503, headers = { ["Retry-After"] = "600" } },
                             { status = 200, body = "refunded" } } })
    local def = { name = "undo", compensate_retry = { max_attempts = 3, initial = 1, jitter = 0 },
      steps = {
        { name = "charge",
          execute = function() return mend.http{ method = "POST", url = server.base .. "/charge" }.body end,
          compensate = function() mend.http{ method = "POST", url = server.base .. "/refund" } end },
        { name = "ship", execute = function() error(mend.fatal("no address")) end },
      } }
    local eng, db = H.new_engine()
    eng:register(def)
    local id = eng:start("undo", {})
    for _ = 1, 200 do
      eng:advance(0)
      if #seen("/refund") == 1 and H.step(eng:status(id), "charge").due then break end
      os.execute("sleep 0.02")
    end
    H.close(eng)
    local eng2 = H.reopen(db)
    eng2:register(def)
    eng2:recover()
    eng2:run()
    assert.are.equal("compensated", eng2:status(id).status)
    local charge, refund = seen("/charge"), seen("/refund")
    assert.are.equal(1, #charge)
    assert.are.equal(id .. "/charge", charge[1].idempotency_key)
    assert.are.equal(2, #refund)
    assert.are.equal(id .. "/charge/compensate", refund[1].idempotency_key)
    assert.are.equal(refund[1].idempotency_key, refund[2].idempotency_key)
  end)

  it("names a failed compensation attempt's requests in its own history row, not the next one's", function()
    script({ ["/undo"] = { { status = 503 }, { status = 200 } } })
    local eng = H.new_engine()
    eng:register({ name = "u", compensate_retry = { max_attempts = 3, initial = 1, jitter = 0 },
      steps = {
        { name = "do", execute = function() return 1 end,
          compensate = function() mend.http{ method = "POST", url = server.base .. "/undo" } end },
        { name = "fail", execute = function() error(mend.fatal("no")) end },
      } })
    local id = eng:start("u", {})
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    local rows = {}
    for _, h in ipairs(eng:history(id)) do
      if h.step == "do" and (h.event == "compensate_failed" or h.to == "compensating"
                             or h.to == "compensated") then
        rows[#rows + 1] = { h.event, h.attempt, h.detail and h.detail:match("-> (%w+)") or "-" }
      end
    end
    assert.are.same({ { "step", 1, "-" }, { "compensate_failed", 1, "503" },
                      { "step", 2, "-" }, { "step", 2, "200" } }, rows)
  end)

  it("sends no Idempotency-Key on GET, nor when the call turns it off or sets its own", function()
    script({ ["/k"] = { { status = 200 } } })
    local eng = H.new_engine()
    eng:register({ name = "k", steps = {
      { name = "a", execute = function() mend.http{ url = server.base .. "/k" } end },
      { name = "b", execute = function()
          mend.http{ method = "POST", url = server.base .. "/k", idempotency_header = false } end },
      { name = "c", execute = function()
          mend.http{ method = "PUT", url = server.base .. "/k",
                     headers = { ["idempotency-key"] = "mine" } } end },
    } })
    local id = eng:start("k", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local reqs = seen("/k")
    assert.are.equal(3, #reqs)
    assert.are.equal(mend.json.null, reqs[1].idempotency_key)
    assert.are.equal(mend.json.null, reqs[2].idempotency_key)
    assert.are.equal("mine", reqs[3].idempotency_key)
  end)

  it("sends a GET with a body as a GET, and with no Content-Type of curl's", function()
    script({ ["/getbody"] = { { status = 200 } } })
    run_http(function()
      return { url = server.base .. "/getbody", method = "GET", body = "q=1" }
    end)
    local r = seen("/getbody")[1]
    assert.are.same({ "GET", mend.json.null }, { r.method, r.content_type })
  end)

  it("sends a big body with no Expect when the call gives Expect = false", function()
    script({ ["/big"] = { { status = 200 } } })
    for _, h in ipairs{ {}, { Expect = false } } do
      run_http(function()
        return { url = server.base .. "/big", method = "POST", body = ("x"):rep(2 * 1024 * 1024),
                 headers = h }
      end)
    end
    local reqs = seen("/big")
    assert.are.same({ "100-continue", mend.json.null }, { reqs[1].expect, reqs[2].expect })
  end)

  it("labels a json body application/json, and a body of the call's own with no type", function()
    script({ ["/ct"] = { { status = 200 } } })
    for _, call in ipairs{ { body = "a=b&c" }, { json = { a = 1 } },
                           { body = "x,y", headers = { ["Content-Type"] = "text/csv" } } } do
      run_http(function()
        call.url, call.method = server.base .. "/ct", "POST"
        return call
      end)
    end
    local types = {}
    for i, r in ipairs(seen("/ct")) do types[i] = r.content_type end
    assert.are.same({ mend.json.null, "application/json", "text/csv" }, types)
  end)

  it("sends a header the call gives empty, empty, and one it gives false, not at all", function()
    script({ ["/empty"] = { { status = 200 } } })
    for _, v in ipairs{ "", "  " } do
      run_http(function()
        return { url = server.base .. "/empty",
                 headers = { Authorization = v, ["User-Agent"] = v } }
      end)
    end
    local reqs = seen("/empty")
    assert.are.equal(2, #reqs)
    for _, r in ipairs(reqs) do
      assert.are.equal("", r.authorization)
      assert.are.same({ "" }, r.user_agent)   -- not curl's, nor mend's
    end
    -- and false sends none, curl's or mend's own included
    local eng, id = run_http(function()
      return { url = server.base .. "/empty", method = "POST", body = "x",
               headers = { ["User-Agent"] = false, ["Idempotency-Key"] = false,
                           ["Accept-Encoding"] = false } }
    end)
    assert.are.equal("succeeded", eng:status(id).status)
    local r = seen("/empty")[3]
    assert.are.same({}, r.user_agent)
    assert.are.same({ mend.json.null, mend.json.null }, { r.idempotency_key, r.accept_encoding })
  end)

  it("sends each item of a map its own Idempotency-Key, ctx.idempotency_key", function()
    script({ ["/item"] = { { status = 200 } } })
    local eng = H.new_engine()
    local keys = {}
    eng:register({ name = "mi", steps = { { name = "charge",
      map = function(ctx) return ctx.input.items end,
      step = { execute = function(ctx)
        keys[#keys + 1] = ctx.idempotency_key
        mend.http{ method = "POST", url = server.base .. "/item" }
      end } } } })
    local id = eng:start("mi", { items = { 1, 2, 3 } })
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local sent = {}
    for _, r in ipairs(seen("/item")) do sent[#sent + 1] = r.idempotency_key end
    table.sort(keys)
    table.sort(sent)
    assert.are.same({ id .. "/charge/1", id .. "/charge/2", id .. "/charge/3" }, keys)
    assert.are.same(keys, sent)
  end)

  it("sends a header of kilobytes whole", function()
    script({ ["/auth"] = { { status = 200 } } })
    local token = "Bearer " .. string.rep("t0K3n", 1000)
    local eng, id = run_http(function()
      return { url = server.base .. "/auth", headers = { Authorization = token } }
    end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(token, seen("/auth")[1].authorization)
  end)

  it("reuses a kept-alive connection for the next request", function()
    script({ ["/ka"] = { { status = 200, body = "1" } } })
    local eng = H.new_engine()
    eng:register({ name = "ka", steps = {
      { name = "a", execute = function() return mend.http{ url = server.base .. "/ka" }.body end },
      { name = "b", execute = function() return mend.http{ url = server.base .. "/ka" }.body end },
    } })
    local id = eng:start("ka", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local reqs = seen("/ka")
    assert.are.equal(2, #reqs)
    assert.are.equal(reqs[1].client_port, reqs[2].client_port)
  end)

  -- A checked URL's parse is what curl reads while its request is in flight, and the engine
  -- remembers 8 (http_int.h, HTTP_URL_MEMO): more distinct URLs in flight at once push the
  -- parses of requests still in flight out of the memo.
  it("sends each of more distinct URLs than it remembers, in flight at once, to its own", function()
    local n, paths = 24, {}
    -- none answered until all are open at once: each URL's parse is still in use by curl
    for i = 1, n do paths["/u" .. i] = { { status = 200, wait_for = n, delay = 60, body = "u" .. i } } end
    script(paths)
    local eng = H.new_engine()
    eng:register(H.one_step("u", { execute = function(ctx)
      local i = ctx.input.i
      local url = i % 2 == 0 and ("http://user" .. i .. ":pw@127.0.0.1:" .. server.port .. "/u" .. i)
                  or (server.base .. "/u" .. i)
      return mend.http{ url = url }.body
    end }))
    local ids = {}
    for i = 1, n do ids[i] = eng:start("u", { i = i }) end
    eng:run()
    local most = 0
    for i = 1, n do
      assert.are.equal("succeeded", eng:status(ids[i]).status)
      assert.are.equal("u" .. i, H.step(eng:status(ids[i]), "work").result)
      local reqs = seen("/u" .. i)
      assert.are.equal(1, #reqs)
      if reqs[1].in_flight > most then most = reqs[1].in_flight end
      if i % 2 == 0 then   -- its own credentials, not another URL's
        local b64 = io.popen("printf user" .. i .. ":pw | base64"):read("l")
        assert.are.equal("Basic " .. b64, reqs[1].authorization)
      else
        assert.are.equal(mend.json.null, reqs[1].authorization)
      end
      local ok = H.events(eng, ids[i], { event = "step", to = "succeeded" })[1]
      assert.matches("^GET http://127.0.0.1:%d+/u" .. i .. " %-> 200", ok.detail)
      assert.is_nil(ok.detail:find("pw", 1, true))
    end
    assert.are.equal(n, most, "at most " .. most .. " requests were open at once")
  end)

  it("sends each request only what its own call asked for, one after another on one engine", function()
    script({ ["/seq"] = { { status = 200 } } })
    local base = server.base .. "/seq"
    local creds = "http://user:secret@127.0.0.1:" .. server.port .. "/seq"
    local calls = {
      { method = "POST", url = base, json = { a = 1 },
        headers = { ["Accept-Encoding"] = "gzip", Authorization = "Bearer t" } },
      { url = base },
      { method = "DELETE", url = base },
      { method = "POST", url = base, body = "x" },
      { method = "HEAD", url = base },
      { url = base },
      { url = creds },
      { url = base },
      { method = "PUT", url = base, body = "y" },
      { url = base },
      -- a table whose fields come from its metatable's __index
      setmetatable({}, { __index = { method = "PATCH", url = base, body = "z" } }),
    }
    local steps = {}
    for i, call in ipairs(calls) do
      steps[i] = { name = "s" .. i, execute = function() return mend.http(call).status end }
    end
    local eng = H.new_engine()
    eng:register({ name = "seq", steps = steps })
    local id = eng:start("seq", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local got = {}
    for i, r in ipairs(seen("/seq")) do
      got[i] = { r.method, r.body, r.accept_encoding, r.authorization }
    end
    local null = mend.json.null
    assert.are.same({
      { "POST", '{"a":1}', "gzip", "Bearer t" },
      { "GET", "", null, null },
      { "DELETE", "", null, null },
      { "POST", "x", null, null },
      { "HEAD", "", null, null },
      { "GET", "", null, null },
      { "GET", "", null, "Basic dXNlcjpzZWNyZXQ=" },
      { "GET", "", null, null },
      { "PUT", "y", null, null },
      { "GET", "", null, null },
      { "PATCH", "z", null, null },
    }, got)
  end)

  -- A kept handle holds the limits its last request set, and a request whose limits are the
  -- same does not set them again: each call must still get its own.
  it("holds each call to its own timeout and max_bytes, one after another on one engine", function()
    script({ ["/lim"] = { { status = 200, delay = 0.4, size = 2000 } } })
    local url = server.base .. "/lim"
    local calls = {
      { url = url, timeout = 0.1 },
      { url = url },
      { url = url, timeout = 0.1 },
      { url = url, timeout = 0.1 },
      { url = url, timeout = 5 },
      { url = url, max_bytes = 1000 },
      { url = url },
      { url = url, max_bytes = 1000 },
      { url = url, max_bytes = 1000 },
      { url = url, max_bytes = 5000 },
    }
    local got = {}
    local eng = H.new_engine()
    eng:register(H.one_step("lim", { execute = function()
      for i, call in ipairs(calls) do
        local ok, res = pcall(mend.http, call)
        got[i] = ok and tostring(res.status)
                 or res.message:match("timed out") and "timed out"
                 or res.message:match("larger than max_bytes") and "too large" or res.message
      end
      return true
    end }))
    local id = eng:start("lim", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "timed out", "200", "timed out", "timed out", "200",
                      "too large", "200", "too large", "too large", "200" }, got)
  end)

  it("sends mend's User-Agent once, or the call's own instead", function()
    script({ ["/ua"] = { { status = 200 } } })
    local eng = H.new_engine()
    eng:register({ name = "ua", steps = {
      { name = "a", execute = function() return mend.http{ url = server.base .. "/ua" }.status end },
      { name = "b", execute = function()
          return mend.http{ url = server.base .. "/ua", headers = { ["user-agent"] = "mine/1" } }.status
        end },
    } })
    local id = eng:start("ua", {})
    eng:run()
    assert.are.equal("succeeded", eng:status(id).status)
    local reqs = seen("/ua")
    assert.are.equal(2, #reqs)
    assert.are.equal(1, #reqs[1].user_agent)
    assert.matches("^mend/%d+%.%d+%.%d+$", reqs[1].user_agent[1])
    assert.are.same({ "mine/1" }, reqs[2].user_agent)
  end)

  it("refuses a call with a bad option, naming the option, and sends nothing", function()
    script({ ["/opt"] = { { status = 200 } } })
    local url = server.base .. "/opt"
    local cases = {
      { { url = url, retry_on = "409" }, "retry_on must be a list of status codes" },
      { { url = url, accept = { 99 } }, "accept must be a list of at most 16 status codes" },
      { { url = url, timeout = -1 }, "timeout must be a number of seconds > 0" },
      { { url = url, connect_timeout = "1" }, "connect_timeout must be a number of seconds > 0" },
      { { url = url, max_bytes = 0 }, "max_bytes must be an integer > 0" },
      { { url = url, body = "a", json = {} }, "give body or json, not both" },
      { { url = url, headers = "x" }, "headers must be a table" },
      -- a length not the body's would leave bytes read as the next request on the connection
      { { url = url, method = "POST", body = "abc", headers = { ["Content-Length"] = "1" } },
        'header "Content-Length" is not the call\'s to set' },
      { { url = url, headers = { ["transfer-encoding"] = "chunked" } },
        'header "transfer-encoding" is not the call\'s to set' },
      -- one empty key on every run's calls would make them one call to a deduping service
      { { url = url, method = "POST", headers = { ["Idempotency-Key"] = "" } },
        'header "Idempotency-Key" is empty: give false to send none' },
      { { url = url, method = "HEAD", body = "a" }, "a HEAD request has no body" },
      { { body = "a" }, "needs a url" },
    }
    for _, c in ipairs(cases) do
      local eng, id = run_http(function() return c[1] end)
      assert.are.equal("failed", eng:status(id).status)
      local f = H.events(eng, id, { event = "step", to = "failed" })[1]
      assert.is_truthy(f.error:find(c[2], 1, true), f.error)
    end
    assert.are.equal(0, #seen("/opt"))
  end)

  it("lets go of a request whose call's table raises while it is read, and raises that error", function()
    -- A workflow's metamethod (here a list's __len) raising out of the call's setup left the
    -- request and its curl handle behind until the engine closed, outside any memory limit:
    -- about 10 KB a call (20,000 calls grew the process by 214 MB).
    local function rss()
      for l in io.lines("/proc/self/status") do
        local v = l:match("^VmRSS:%s+(%d+)")
        if v then return tonumber(v) end
      end
    end
    local before, after, caught
    script({ ["/after"] = { { status = 200 } } })
    local eng, id = run_http(function()
      local bad = setmetatable({}, { __len = function() error("no length", 0) end })
      before = rss()
      for _ = 1, 20000 do
        local _, e = pcall(mend.http, { url = server.base .. "/never", retry_on = bad })
        caught = e
      end
      after = rss()
      return { url = server.base .. "/after" }
    end)
    assert.are.equal("no length", caught)
    assert.is_true(after - before < 50 * 1024, ("grew by %d KB"):format(after - before))
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(0, #seen("/never"))
  end)

  it("fails a 400 for good, without retry, and compensates what went before", function()
    script({ ["/bad"] = { { status = 400, body = "card declined" } } })
    local eng = H.new_engine()
    local undone = false
    eng:register({ name = "o", steps = {
      { name = "reserve", execute = function() return 1 end,
        compensate = function() undone = true end },
      { name = "charge", retry = { max_attempts = 5, initial = 1, jitter = 0 },
        execute = function() return mend.http{ method = "POST", url = server.base .. "/bad" } end },
    } })
    local id = eng:start("o", {})
    eng:run()
    assert.are.equal("compensated", eng:status(id).status)
    assert.is_true(undone)
    assert.are.equal(1, #seen("/bad"))
    local f = H.events(eng, id, { event = "step", step = "charge", to = "failed" })[1]
    assert.matches("HTTP 400 from POST", f.error)
    assert.matches("card declined", f.error)
  end)

  -- curl reads past a 100, 102 or 103 to the final answer, but hands back a 101 as one, and
  -- read the connection's new protocol as its body: a step got { status = 101 } (after the
  -- peer closed, or its timeout).
  it("fails a 101 Switching Protocols for good, naming it, and reads past other 1xx", function()
    script({ ["/ws"] = { { status = 101, headers = { Upgrade = "websocket",
                                                     Connection = "Upgrade" } } },
             ["/hints"] = { { interim = { 100, 102, 103 }, status = 200, body = "final" } } })
    for _, raise in ipairs({ true, false }) do
      local eng, id = run_http(function() return { url = server.base .. "/ws", raise = raise,
                                                   accept = { 101 } } end)
      assert.are.equal("failed", eng:status(id).status)   -- fatal: not retried
      assert.matches("mend.http GET " .. server.base .. "/ws: the answer is 101 Switching "
                     .. "Protocols .*mend.http does not upgrade connections",
                     H.step(eng:status(id), "work").error)
    end
    assert.are.equal(2, #seen("/ws"))
    local eng, id, box = run_http(function() return { url = server.base .. "/hints" } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ 200, "final" }, { box.res.status, box.res.body })
  end)

  it("maps per call: retry_on, fatal_on, accept and raise = false", function()
    script({ ["/c"] = { { status = 409 }, { status = 404 } }, ["/d"] = { { status = 500 } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/c", retry_on = { 409 },
                                                     accept = { 404 } } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(404, box.res.status)
    assert.are.equal(2, #seen("/c"))
    eng, id = run_http(function() return { url = server.base .. "/d", fatal_on = { 500 } } end)
    assert.are.equal("failed", eng:status(id).status)
    assert.are.equal(1, #seen("/d"))
    eng, id, box = run_http(function() return { url = server.base .. "/d", raise = false } end)
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(500, box.res.status)
  end)

  it("retries a refused connection as retryable", function()
    local port = closed_port()
    local eng, id = run_http(function() return { url = "http://127.0.0.1:" .. port .. "/x" } end,
      { max_attempts = 2, initial = 1, jitter = 0 })
    assert.are.equal("needs_attention", eng:status(id).status)   -- attempts exhausted
    local rw = H.events(eng, id, { event = "step", to = "retry_wait" })
    assert.are.equal(1, #rw)
    assert.matches("Couldn't connect", rw[1].error)
  end)

  it("gives up on a response slower than timeout, as retryable", function()
    script({ ["/slow"] = { { status = 200, delay = 2 } } })
    local eng, id = run_http(function() return { url = server.base .. "/slow", timeout = 0.2 } end,
      { max_attempts = 2, initial = 1, jitter = 0 })
    assert.are.equal("needs_attention", eng:status(id).status)
    local rw = H.events(eng, id, { event = "step", to = "retry_wait" })
    assert.are.equal(1, #rw)
    assert.matches("timed out", rw[1].error)
  end)

  it("lets go of the request of an attempt over its step timeout; the next attempt answers", function()
    script({ ["/stall"] = { { status = 200, delay = 3, body = "late" },
                            { status = 200, body = "on time" } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/stall" } end,
      { max_attempts = 3, initial = 0.1, jitter = 0 }, { clock = "real" }, { timeout = 0.3 })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal("on time", box.res.body)
    local rw = H.events(eng, id, { event = "step", to = "retry_wait" })
    assert.are.equal(1, #rw)
    -- the timed-out attempt's row names the request it was waiting on, as any attempt's does
    assert.matches("^GET http://127.0.0.1:%d+/stall %-> abandoned at the attempt's end %(0%.%d%d%d s%)$",
                   rw[1].detail)
  end)

  -- A kept connection stays watched between requests (src/engine/http.c, on_socket): one
  -- the server closes while idle must neither spin the loop nor fail the next request.
  it("reconnects after the server closed an idle kept connection, without spinning", function()
    script({ ["/first"] = { { status = 200, body = "one", close_after = 0.1 } },
             ["/second"] = { { status = 200, body = "two" } } })
    local eng = H.new_engine({ clock = "real" })
    local got = {}
    eng:register(H.one_step("idle", { execute = function()
      got[1] = mend.http{ url = server.base .. "/first" }.body
      mend.sleep(2)   -- the server closes the connection 0.1 s into this
      got[2] = mend.http{ url = server.base .. "/second" }.body
      return true
    end }))
    local id = eng:start("idle", {})
    local cpu = os.clock()
    eng:run()
    cpu = os.clock() - cpu
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.same({ "one", "two" }, got)
    local s = seen()
    assert.are.equal(2, #s)
    assert.are_not.equal(s[1].client_port, s[2].client_port)   -- a new connection
    -- a loop woken by the closed socket throughout would burn most of the sleep
    assert.is_true(cpu < 0.5, "the loop spun for " .. cpu .. " s of CPU")
  end)

  -- A server that closes a kept connection just as the next request goes out on it (its idle
  -- timeout, its requests-per-connection limit) resets it: libuv says POLLERR, and curl told
  -- of the error alone failed the request ("select/poll returned error") where its own poll
  -- would have read the reset and sent the request again on a new connection.
  it("sends a request again on a new connection when the server resets the kept one", function()
    script({ ["/first"] = { { status = 200, body = "one", close_after = 0.5 } },
             ["/second"] = { { status = 200, body = "two" } } })
    local eng = H.new_engine({ clock = "real" })
    local got = {}
    eng:register(H.one_step("reset", { retry = { max_attempts = 1 }, execute = function()
      got[1] = mend.http{ url = server.base .. "/first" }.body
      -- sent on the kept connection while the server waits to close it, unread: a reset
      got[2] = mend.http{ url = server.base .. "/second" }.body
      return true
    end }))
    local id = eng:start("reset", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status, tostring(st.error))
    assert.are.same({ "one", "two" }, got)
    local s = seen("/second")
    assert.are.equal(1, #s)
    assert.are_not.equal(seen("/first")[1].client_port, s[1].client_port)
  end)

  -- curl counts those sends again on the handle, and before curl 8.17 only curl_easy_reset
  -- sets the count back: a handle the engine kept for the next request gave up on the sixth
  -- of them in its life ("Connection died, tried 5 times"), however far apart they came.
  it("sends a request again after a reset however many it sent again before", function()
    script({ ["/each"] = { { status = 200, body = "ok", close_after = 0.2 } } })
    local eng = H.new_engine({ clock = "real" })
    local got = {}
    eng:register(H.one_step("resets", { retry = { max_attempts = 1 }, execute = function()
      for i = 1, 8 do got[i] = mend.http{ url = server.base .. "/each" }.body end
      return true
    end }))
    local id = eng:start("resets", {})
    eng:run()
    local st = eng:status(id)
    assert.are.equal("succeeded", st.status, tostring(st.error))
    assert.are.equal(8, #got)
  end)

  -- curl 7.88 refuses a header line over 100 KiB as out of memory, with no message of its
  -- own: "Out of memory" sent a person looking at the worker's memory, not at the service.
  it("fails a response header line over curl's limit with an error that says so", function()
    script({ ["/bighead"] = { { status = 200, body = "ok",
                                headers = { ["X-Big"] = string.rep("a", 200000) } } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/bighead" } end,
                                  { max_attempts = 1 })
    local err = eng:status(id).error
    assert.is_nil(box.res)
    assert.truthy(err:find("over curl's limit of 100 KiB", 1, true), err)
    assert.truthy(err:find("fatal", 1, true), err)
  end)

  -- curl (7.88 as Debian patches it, 8.3 on) refuses header fields over 300 KiB in all, each
  -- line short, as a receive error, which was read as a connection reset: retried, each
  -- attempt given the same answer. The service's answer is the same every time: fatal, named.
  it("fails a response whose header fields are over curl's limit in all, not retried", function()
    local many = {}
    for i = 1, 4000 do many[i] = string.rep("b", 90) end
    script({ ["/manyhead"] = { { status = 200, body = "ok", headers = { ["X-Many"] = many } } } })
    local eng, id, box = run_http(function() return { url = server.base .. "/manyhead" } end,
                                  { max_attempts = 3, initial = 0, jitter = 0 })
    local err = eng:status(id).error
    assert.is_nil(box.res)
    assert.truthy(err:find("fatal", 1, true), err)
    assert.truthy(err:find("header fields over curl's limit of 300 KiB", 1, true), err)
    assert.are.equal(1, #seen("/manyhead"))
  end)

  it("fails a response over max_bytes with an error that says so", function()
    script({ ["/big"] = { { status = 200, size = 5000 } } })
    local eng, id = run_http(function() return { url = server.base .. "/big", max_bytes = 1000 } end)
    assert.are.equal("failed", eng:status(id).status)
    local f = H.events(eng, id, { event = "step", to = "failed" })[1]
    assert.matches("larger than max_bytes %(1000 bytes%)", f.error)
  end)

  it("refuses a URL that is not http or https, naming it", function()
    local eng, id = run_http(function() return { url = "file:///etc/passwd" } end)
    assert.are.equal("failed", eng:status(id).status)
    local f = H.events(eng, id, { event = "step", to = "failed" })[1]
    assert.matches("is not http or https", f.error)
    -- a URL's password is never in the message, whether the URL parses or not
    for _, c in ipairs {
      { "ftp://user:s3cret@example.com/x", 'url "ftp://***@example.com/x" is not http or https' },
      { "http://user:s3cret@exa mple.com/x", 'bad url "http://***@exa mple.com/x"' },
    } do
      local e2, id2 = run_http(function() return { url = c[1] } end)
      local f2 = H.events(e2, id2, { event = "step", to = "failed" })[1]
      assert.is_truthy(f2.error:find(c[2], 1, true), f2.error)
      assert.is_nil(f2.error:find("s3cret", 1, true))
    end
  end)

  it("refuses a host outside http_allow and calls one inside it", function()
    script({ ["/a"] = { { status = 200 } } })
    local eng, id = run_http(function() return { url = server.base .. "/a" } end, nil,
      { http_allow = { "*.example.com", "payments.internal" } })
    assert.are.equal("failed", eng:status(id).status)
    local f = H.events(eng, id, { event = "step", to = "failed" })[1]
    assert.matches('host "127.0.0.1" is not allowed', f.error)
    assert.are.equal(0, #seen("/a"))
    eng, id = run_http(function() return { url = server.base .. "/a" } end, nil,
      { http_allow = { "payments.internal", "127.0.0.1" } })
    assert.are.equal("succeeded", eng:status(id).status)
    assert.are.equal(1, #seen("/a"))
  end)

  it("refuses a self-signed certificate, and accepts it given as ca_file", function()
    local dir = H.tmp_dir()
    local cert, key = dir .. "/cert.pem", dir .. "/key.pem"
    assert(os.execute("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
                      .. " -addext subjectAltName=IP:127.0.0.1 -keyout " .. key .. " -out " .. cert
                      .. " >/dev/null 2>&1"))
    H.write_file(dir, "script.json", mend.json.encode({ ["/tls"] = { { status = 200, body = "secure" } } }))
    H.write_file(dir, "log.jsonl", "")
    local port, pid, pipe = spawn(dir .. "/script.json", dir .. "/log.jsonl", { cert = cert, key = key })
    local url = "https://127.0.0.1:" .. port .. "/tls"
    local ok, err = pcall(function()
      local eng, id = run_http(function() return { url = url } end)
      assert.are.equal("failed", eng:status(id).status)   -- fatal: not retried
      local f = H.events(eng, id, { event = "step", to = "failed" })[1]
      assert.matches("certificate", f.error)
      local eng2, id2, box = run_http(function() return { url = url, ca_file = cert } end)
      assert.are.equal("succeeded", eng2:status(id2).status)
      assert.are.equal("secure", box.res.body)
    end)
    os.execute("kill " .. pid)
    pipe:close()
    assert(ok, err)
  end)

  it("carries 1,000 concurrent requests on one loop", function()
    -- the server answers none until all 1,000 are open at once (or gives up after 60 s): a loop
    -- that waited for one answer before sending the next would never get there
    script({ ["/many"] = { { status = 200, wait_for = 1000, delay = 60, body = "ok" } } })
    local eng = H.new_engine()
    eng:register(H.one_step("m", { execute = function(ctx)
      return mend.http{ method = "POST", url = server.base .. "/many", json = ctx.input,
                        timeout = 120, connect_timeout = 60 }.body
    end }))
    local ids = {}
    for i = 1, 1000 do ids[i] = eng:start("m", { i = i }) end
    eng:run()
    for i = 1, 1000 do assert.are.equal("succeeded", eng:status(ids[i]).status) end
    local keys, most = {}, 0
    for _, r in ipairs(seen("/many")) do
      keys[r.idempotency_key] = true
      if r.in_flight > most then most = r.in_flight end
    end
    local n = 0
    for _ in pairs(keys) do n = n + 1 end
    assert.are.equal(1000, n)   -- one request a run: none retried
    -- the server had every one of them open at once (the loop never waited for one to answer)
    assert.are.equal(1000, most, "at most " .. most .. " requests were open at once")
  end)
end)

-- The specs' server itself: a client that resets its connection (a worker killed mid-request,
-- spec/pg_http_kill_spec.lua) ended the exchange, which is the client's business and said in
-- a line; an error of the server's own is shown whole, traceback and all.
describe("tests/http_server.py #sqlite", function()
  after_each(H.cleanup)

  it("says a client's reset in a line, and shows an error of its own whole", function()
    local dir = H.tmp_dir()
    local script = H.write_file(dir, "script.json", mend.json.encode({
      ["/slow"] = { { status = 200, delay = 0.3 } }, ["/bad"] = { { status = "x" } } }))
    local err = dir .. "/stderr"
    local port, pid, pipe = spawn(script, dir .. "/log", nil, err)
    local client = H.write_file(dir, "client.py", [[
import socket, struct, sys, time
def send(req, reset):
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    c.sendall(req)
    if reset:
        time.sleep(0.1)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        c.recv(100)
    c.close()
send(b"GET /slow HTTP/1.1\r\nHost: x\r\n", True)        # reset inside the request
send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", True)    # reset while the answer waits
send(b"GET /bad HTTP/1.1\r\nHost: x\r\n\r\n", False)    # a status that is no number
]])
    local said = ""
    local ok = pcall(function()
      assert.are.equal(0, (H.shell("python3 " .. client .. " " .. port)))
      H.wait_for("the server's three lines of stderr", function()
        local f = io.open(err)
        said = f and f:read("a") or ""
        if f then f:close() end
        local _, resets = said:gsub("reset its connection", "")
        return resets >= 2 and said:find("TypeError", 1, true) ~= nil
      end, 5)
    end)
    os.execute("kill " .. pid)
    pipe:close()
    assert(ok, "stderr: " .. said)
    local _, tracebacks = said:gsub("Traceback", "")
    assert.are.equal(1, tracebacks, said)
  end)
end)
