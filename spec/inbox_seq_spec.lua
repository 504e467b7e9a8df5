-- An event sent again with a key the run's inbox has is kept once and takes no inbox `seq`:
-- the inbox numbers its events without gaps on both stores (a duplicate used one up on each,
-- as an ignored insert draws its number before it is ignored), whether the event is sent at
-- once (eng:signal) or with a batch (mend serve, a ticking host), or is a child's end.
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"

local WAIT = "return { name = 'wait', steps = { { name = 'w', wait_for = 'never', timeout = 3600 } } }\n"

local function seqs(db, id)
  local out = {}
  for _, v in ipairs(H.sql(db, "SELECT seq FROM inbox WHERE run_id = '" .. id .. "' ORDER BY seq")) do
    out[#out + 1] = tonumber(v)
  end
  return out
end

local function no_gaps(list)
  for i = 2, #list do
    if list[i] ~= list[i - 1] + 1 then return false end
  end
  return true
end

describe("the inbox's numbering", function()
  after_each(S.cleanup)

  it("has no gap for a duplicate key sent at once (eng:signal)", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "wait.lua", WAIT)
    local eng, db = H.new_engine()
    eng:load(dir .. "/wait.lua")
    local id = eng:start("wait", {})
    eng:advance(1)
    assert.are.equal("sent", (eng:signal(id, "note", 1, { key = "k" })))
    assert.are.equal("duplicate", (eng:signal(id, "note", 2, { key = "k" })))
    assert.are.equal("duplicate", (eng:signal(id, "note", 3, { key = "k" })))
    assert.are.equal("sent", (eng:signal(id, "note", 4)))
    assert.are.equal("sent", (eng:signal(id, "note", 5, { key = "j" })))
    local got = seqs(db, id)
    assert.are.equal(3, #got)
    assert.is_true(no_gaps(got), "gaps in " .. mend.json.encode(got))
  end)

  it("has no gap for a duplicate key sent with a batch (mend serve)", function()
    local dir, db = S.workspace()
    local base = S.start(dir, db)
    local code, r = S.post(base, "/api/v1/runs", { workflow = "wait", input = {} })
    assert.are.equal(201, code)
    local path = "/api/v1/runs/" .. r.id .. "/events"
    assert.are.equal(202, (S.post(base, path, { name = "note", key = "k", data = 1 })))
    assert.are.equal(200, (S.post(base, path, { name = "note", key = "k", data = 2 })))
    assert.are.equal(202, (S.post(base, path, { name = "note", data = 3 })))
    local got = seqs(db, r.id)
    assert.are.equal(2, #got)
    assert.is_true(no_gaps(got), "gaps in " .. mend.json.encode(got))
  end)
end)
