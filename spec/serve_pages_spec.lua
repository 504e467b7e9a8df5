-- GET /api/v1/dlq and GET /api/v1/runs/{id}/events a page at a time, against a real `mend
-- serve`: the answer is the array it always was, at most `limit` entries (1000 by default,
-- 10000 at most), with a Link rel="next" exactly when more follow, as a history's pages are;
-- following the links reads every entry once, in order; a bad limit or after is 400
-- bad_query (docs/http-api.md).
local H = require "spec.helper"
local mend = require "mend"

local S = require "spec.support.serve_harness"
local workspace, start, get, post = S.workspace, S.start, S.get, S.post
local json = mend.json

local function next_of(headers)
  return headers and headers:match('[Ll]ink: <([^>]+)>; rel="next"')
end

-- Every page from `path` on, following the links: the entries, and how many pages.
local function walk(base, path)
  local all, pages = {}, 0
  while path do
    local code, list, raw, headers = get(base, path)
    assert.are.equal(200, code, path .. ": " .. tostring(raw))
    assert.are.equal("table", type(list))
    pages = pages + 1
    for _, e in ipairs(list) do all[#all + 1] = e end
    path = next_of(headers)
  end
  return all, pages
end

local function refused(base, path, pattern)
  local code, e, raw = get(base, path)
  assert.are.equal(400, code, path .. ": " .. tostring(raw))
  assert.are.equal("bad_query", e.error.code, path)
  assert.matches(pattern, e.error.message)
end

describe("the HTTP API's dead letters and inbox, paged", function()
  after_each(S.cleanup)

  it("pages the dead-letter queue in its order, ties of time by run id", function()
    local dir, db = workspace()
    local base = start(dir, db)
    -- 7 dead letters, three at one time, one with none
    local values = {}
    for i = 1, 7 do
      local at = i <= 3 and "100" or i == 7 and "NULL" or tostring(100 + i)
      values[#values + 1] = ("('d%02d', 'compensation_failed', 's', 'e', NULL, %s)"):format(8 - i, at)
    end
    H.sql(db, "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES " .. table.concat(values, ", "))
    local code, whole, _, headers = get(base, "/api/v1/dlq")
    assert.are.equal(200, code)
    assert.are.equal(7, #whole)
    assert.is_nil(next_of(headers))
    local order = {}
    for _, d in ipairs(whole) do order[#order + 1] = d.run_id end
    assert.are.same({ "d01", "d05", "d06", "d07", "d04", "d03", "d02" }, order)
    for _, limit in ipairs { 1, 2, 3, 7 } do
      local all, pages = walk(base, "/api/v1/dlq?limit=" .. limit)
      assert.are.same(whole, all)
      assert.are.equal(math.ceil(7 / limit), pages)
    end
    refused(base, "/api/v1/dlq?limit=0", "^limit must be a whole number from 1 to 10000")
    refused(base, "/api/v1/dlq?limit=10001", "^limit must be a whole number from 1 to 10000")
    refused(base, "/api/v1/dlq?after=d03", "^after \"d03\" is not one this server gave")
    refused(base, "/api/v1/dlq?cursor=x", "unknown query parameter \"cursor\"")
  end)

  it("pages a run's inbox by seq; a run that does not exist is 404", function()
    local dir, db = workspace()
    local base = start(dir, db)
    local code, r = post(base, "/api/v1/runs", { workflow = "wait", input = {} })
    assert.are.equal(201, code, json.encode(r))
    local path = "/api/v1/runs/" .. r.id .. "/events"
    for i = 1, 5 do
      local c, body = post(base, path, { name = "note", data = { n = i } })
      assert.are.equal(202, c, json.encode(body))
    end
    local _, whole, _, headers = get(base, path)
    assert.are.equal(5, #whole)
    assert.is_nil(next_of(headers))
    assert.are.same({ n = 1 }, whole[1].payload)
    for _, limit in ipairs { 1, 2, 5 } do
      local all, pages = walk(base, path .. "?limit=" .. limit)
      assert.are.same(whole, all)
      assert.are.equal(math.ceil(5 / limit), pages)
    end
    local _, rest = get(base, path .. "?after=" .. whole[3].seq)
    assert.are.same({ whole[4], whole[5] }, rest)
    local _, none = get(base, path .. "?after=" .. whole[5].seq)
    assert.are.same({}, none)
    refused(base, path .. "?after=-1", "^after must be a whole number")
    refused(base, path .. "?limit=x", "^limit must be a whole number")
    assert.are.equal(404, (get(base, "/api/v1/runs/nosuchrun/events?limit=2")))
  end)
end)

describe("the dead-letter queue a page at a time, from Lua and the CLI", function()
  after_each(S.cleanup)

  local function seven(db)
    local values = {}
    for i = 1, 7 do
      values[#values + 1] = ("('d%02d', 'compensation_failed', 's', 'e', NULL, %d)"):format(i, 100 + i)
    end
    H.sql(db, "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES " .. table.concat(values, ", "))
  end

  it("eng:dlq{limit, after} pages it; bad options raise", function()
    local dir, db = workspace()
    local eng = H.reopen(db)
    seven(db)
    local seen, page = {}, eng:dlq{ limit = 3 }
    while #page > 0 do
      for _, d in ipairs(page) do seen[#seen + 1] = d.run_id end
      page = eng:dlq{ after = page[#page], limit = 3 }
    end
    assert.are.same({ "d01", "d02", "d03", "d04", "d05", "d06", "d07" }, seen)
    assert.are.equal(7, #eng:dlq())
    assert.has_error(function() eng:dlq{ limit = 0 } end, "dlq: limit must be a whole number from 1 to 10000, got 0")
    assert.has_error(function() eng:dlq{ after = "d03" } end, "dlq: after must be an entry of the page before")
    assert.has_error(function() eng:dlq{ lmit = 3 } end)
    H.close(eng)
    local rc, out = H.shell(H.MEND .. " dlq --json --limit 2 --db " .. H.quote(db) .. " 2>&1")
    assert.are.equal(0, rc, out)
    assert.matches("the 2 oldest dead letters shown; more follow", out)
    local list = json.decode(out:match("%[.*%]"))
    assert.are.same({ "d01", "d02" }, { list[1].run_id, list[2].run_id })
    rc, out = H.shell(H.MEND .. " dlq --limit 7 --db " .. H.quote(db) .. " 2>&1")
    assert.are.equal(0, rc, out)
    assert.is_nil(out:find("more follow"))
    rc, out = H.shell(H.MEND .. " dlq --limit 0 --db " .. H.quote(db) .. " 2>&1")
    assert.are.equal(2, rc, out)
    assert.matches("%-%-limit must be a whole number from 1 to 10000", out)
    assert.is_truthy(dir)
  end)
end)
