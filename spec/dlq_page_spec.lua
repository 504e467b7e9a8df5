-- The dead-letter queue's pages (eng:dlq, mend dlq, GET /api/v1/dlq): in the order of
-- dlq_page (a missing `at` first, as -1; ties by run id), each page walked in that index from
-- its cursor rather than a sort of the whole queue (SQLite schema 19, PostgreSQL 9), and the
-- index added to a database an older mend left. Not tagged #sqlite: these run on PostgreSQL too.
local H = require "spec.helper"

-- n rows straight into the queue (the page reads nothing else): every tenth without `at`, the
-- others on seven times, so that ties are many.
local function fill(db, n)
  H.sql(db, ("INSERT INTO dlq(run_id, reason, step, error, detail, at)"
    .. " WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < %d)"
    .. " SELECT 'r' || (100000 + (i * 7919) %% 100000), 'compensation_failed', 's', 'e', NULL,"
    .. " CASE WHEN i %% 10 = 0 THEN NULL ELSE (i %% 7) * 1.5 END FROM c"):format(n))
end

-- Every row, page by page (limit `per`), each page from the last entry of the one before.
local function walk(eng, per)
  local out, last = {}, nil
  repeat
    local page = eng:dlq{ limit = per, after = last }
    for _, e in ipairs(page) do out[#out + 1] = e end
    last = page[#page]
  until #page < per
  return out
end

-- The page's statement as the store sends it (src/store/schema.c Q_DLQ, src/store/pg/pg_view.c),
-- a cursor written in.
local function plan(db)
  if H.is_pg(db) then
    H.sql(db, "ANALYZE dlq")
    return table.concat(H.sql(db, "EXPLAIN SELECT run_id, reason, step, error, detail, at FROM dlq"
      .. [[ WHERE (coalesce(at, -1), run_id COLLATE "C") > (1.5::float8, 'r1'::text)]]
      .. [[ ORDER BY coalesce(at, -1), run_id COLLATE "C" LIMIT 50::bigint]]), "\n")
  end
  return table.concat(H.sql(db, "EXPLAIN QUERY PLAN SELECT run_id, reason, step, error, detail, at"
    .. " FROM dlq WHERE coalesce(at, -1) >= 1.5 AND (coalesce(at, -1) > 1.5 OR run_id > 'r1')"
    .. " ORDER BY coalesce(at, -1), run_id LIMIT 50"), "\n")
end

local function has_index(db)
  local q = H.is_pg(db)
    and "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'dlq_page'"
    or "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'dlq_page'"
  return H.sql(db, q)[1] == "1"
end

local function expected(eng)
  local all = eng:dlq{ limit = 10000 }
  table.sort(all, function(a, b)
    local x, y = a.at or -1, b.at or -1
    if x ~= y then return x < y end
    return a.run_id < b.run_id
  end)
  return all
end

local function ids(list)
  local out = {}
  for i, e in ipairs(list) do out[i] = e.run_id end
  return out
end

describe("the dead-letter queue's pages", function()
  after_each(H.cleanup)

  it("come in order, a missing time first and ties by run id, each page after the last", function()
    local eng, db = H.new_engine()
    fill(db, 500)
    local want = expected(eng)
    assert.are.equal(500, #want)
    assert.is_nil(want[1].at)
    assert.are.same(ids(want), ids(walk(eng, 7)))
    assert.are.same(ids(want), ids(walk(eng, 500)))
  end)

  it("are read in the index from the cursor: no scan and sort of the whole queue", function()
    local _, db = H.new_engine()
    fill(db, 5000)
    local p = plan(db)
    assert.is_truthy(p:find("dlq_page", 1, true), p)
    if H.is_pg(db) then
      assert.is_falsy(p:find("Sort", 1, true), p)
      assert.is_falsy(p:find("Seq Scan", 1, true), p)
    else
      assert.is_falsy(p:find("TEMP B-TREE", 1, true), p)
      assert.is_truthy(p:find("SEARCH dlq USING INDEX dlq_page", 1, true), p)
    end
  end)

  it("get their index in a database the release before left, and read as before", function()
    local eng, db = H.new_engine()
    fill(db, 300)
    local want = ids(expected(eng))
    H.close(eng)
    local pg = H.is_pg(db)
    H.sql(db, "DROP INDEX dlq_page")
    H.sql(db, "ALTER TABLE inbox DROP COLUMN who")   -- schema 20 / PostgreSQL 10's
    H.sql(db, ("UPDATE meta SET value = '%s' WHERE key = 'schema_version'"):format(pg and 8 or 18))
    if not pg then H.sql(db, "PRAGMA user_version = 18") end
    assert.is_false(has_index(db))
    local eng2 = H.reopen(db)
    assert.is_true(has_index(db))
    assert.are.same({ pg and "10" or "21" }, H.sql(db, "SELECT value FROM meta WHERE key = 'schema_version'"))
    assert.are.same(want, ids(walk(eng2, 11)))
  end)
end)
