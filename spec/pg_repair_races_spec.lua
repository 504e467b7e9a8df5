-- Two servers on one PostgreSQL database, each resolving the same dead letters at once, in
-- opposite orders (two operators' scripts working through the queue): each letter resolved
-- at most once, what is answered 200 recorded; both servers still serve. The look at a run's status holds its
-- row until the batch commits, several repairs of one turn in one batch, so the two servers'
-- batches may wait for each other: PostgreSQL then aborts one ("deadlock detected", 503), and
-- the repairs that batch held must not be answered as made.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"
local json = require("mend").json
local q, sh = H.quote, H.shell

describe("resolves of the same dead letters on two PostgreSQL servers in opposite orders", function()
  after_each(function()
    S.stop_all()
    H.cleanup()
  end)

  it("each is resolved at most once, as its answers say; no server stops", function()
    local dir, db = S.workspace()
    if not H.is_pg(db) then return end
    local ids = {}
    for i = 1, 12 do ids[i] = S.dead_letter(dir, db, "down" .. i) end
    local a, pa = S.start(dir, db)
    local b, pb = S.start(dir, db)
    local cmds = {}
    local n = #ids
    for i = 1, n do
      for _, side in ipairs({ { a, ids[i], "a" .. i }, { b, ids[n + 1 - i], "b" .. (n + 1 - i) } }) do
        local out = dir .. "/" .. side[3]
        cmds[#cmds + 1] = ("curl -s -m 20 -o %s.out -w '%%{http_code}' -H 'Content-Type: application/json' " ..
                           "-d '{\"note\":\"x\"}' %s >%s.code &"):format(q(out), q(side[1] .. "/api/v1/dlq/" .. side[2] .. "/resolve"), q(out))
      end
    end
    sh("(" .. table.concat(cmds, " ") .. " wait) >/dev/null 2>&1")
    local got = {}
    for i = 1, n do
      local ca = tonumber(H.read(dir .. "/a" .. i .. ".code"))
      local cb = tonumber(H.read(dir .. "/b" .. i .. ".code"))
      local _, history = S.get(a, "/api/v1/runs/" .. ids[i] .. "/history")
      local ops = 0
      for _, h in ipairs(history or {}) do
        if h.event == "operator" then ops = ops + 1 end
      end
      got[#got + 1] = { ids[i], ca, cb, ops, H.read(dir .. "/a" .. i .. ".out"), H.read(dir .. "/b" .. i .. ".out") }
    end
    local alive_a = os.execute("kill -0 " .. pa .. " 2>/dev/null")
    local alive_b = os.execute("kill -0 " .. pb .. " 2>/dev/null")
    -- A batch PostgreSQL aborts for a deadlock answers its repairs 503 (the client may ask
    -- again); what is answered 200 is recorded, once.
    local why = json.encode(got) .. "\nalive: " .. tostring(alive_a) .. " " .. tostring(alive_b) ..
                "\n" .. H.read(dir .. "/serve.err"):sub(1, 3000)
    local resolved = 0
    for _, g in ipairs(got) do
      local ok = 0
      for _, code in ipairs({ g[2], g[3] }) do
        assert.is_truthy(code == 200 or code == 409 or code == 503, why)
        if code == 200 then ok = ok + 1 end
      end
      assert.are.equal(ok, g[4], why)
      assert.is_true(ok <= 1, why)
      resolved = resolved + ok
    end
    assert.is_true(resolved >= 1, why)
    assert.is_truthy(alive_a and alive_b, "a server stopped")
  end)
end)
