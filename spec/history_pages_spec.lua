-- A long history is read in pages by every reader of it: `mend history` in each of its forms
-- (the whole, --json, --step, --chart, --after), the REPL's reports (only the rows after the
-- last seen); page bounds are the HTTP API's on the CLI and in Lua; an unknown run is said to
-- be one. The CLI and the REPL run in this process, on engines whose reads are counted.
local H = require "spec.helper"
local mend = require "mend"
local json = mend.json

local N = 1500   -- log lines of the noisy step: more rows than a page has

local WORKFLOW = ([[
local mend = require "mend"
return { name = "long", steps = {
  { name = "noisy", execute = function(ctx)
      for i = 1, %d do ctx:log("line %%d", i) end
      return true
    end },
  { name = "nap", execute = function() mend.sleep(10); return true end },
} }
]]):format(N)

-- Calls fn with mend.engine giving engines whose history reads are watched; returns what was
-- read: whole (reads of the whole history), rows (all the rows read), most (the longest page).
local function watched(fn)
  local real = mend.engine
  local seen = { whole = 0, rows = 0, most = 0 }
  mend.engine = function(conf)
    local e = real(conf)
    local function history(_, id, opts)
      local page, err = e:history(id, opts)
      if opts == nil then seen.whole = seen.whole + 1 end
      seen.rows = seen.rows + (page and #page or 0)
      seen.most = math.max(seen.most, page and #page or 0)
      return page, err
    end
    return setmetatable({}, { __index = function(_, k)
      if k == "history" then return history end
      local v = e[k]
      if type(v) == "function" then return function(_, ...) return v(e, ...) end end
      return v
    end })
  end
  local ok, err = pcall(fn)
  mend.engine = real
  assert(ok, err)
  return seen
end

-- Runs fn with stdout going to a file (and stdin read from `input`, if given); what it wrote.
local function captured(fn, input)
  local out_path = os.tmpname()
  local saved_out, saved_in = io.stdout, io.stdin
  io.stdout = assert(io.open(out_path, "w"))
  if input then
    local in_path = os.tmpname()
    local f = assert(io.open(in_path, "w"))
    f:write(input)
    f:close()
    io.stdin = assert(io.open(in_path, "r"))
    os.remove(in_path)
  end
  local ok, res = pcall(fn)
  io.stdout:close()
  io.stdout, io.stdin = saved_out, saved_in
  local text = H.slurp(out_path)
  os.remove(out_path)
  assert(ok, res)
  return text, res
end

-- `mend history ARGS` in this process: its exit code, stdout and what it read.
local function history_cmd(db, ...)
  local args = { "history", ... }
  args[#args + 1] = "--db"
  args[#args + 1] = db
  local code
  local seen = watched(function()
    local text = captured(function() code = require("mend.cli").main(args) end)
    args.out = text
  end)
  return code, args.out, seen
end

-- A run of the long workflow on a new database, left asleep in its second step (or ended).
local function long_run(ended)
  local dir = H.tmp_dir()
  local path = H.write_file(dir, "long.lua", WORKFLOW)
  local eng, db = H.new_engine()
  eng:load(path)
  local id = eng:start("long", {})
  eng:advance(ended and 20 or 0)
  return eng, db, id, path
end

describe("mend history on a long run", function()
  after_each(H.cleanup)

  it("reads every form in pages and prints what the whole history gives", function()
    local eng, db, id = long_run(true)
    local whole = eng:history(id)
    assert.is_true(#whole > N, #whole)
    local page = mend.history_page
    assert.is_true(#whole > page)   -- the reads below cross pages

    local code, out, seen = history_cmd(db, id, "--json")
    assert.are.equal(0, code, out)
    assert.are.same(whole, json.decode(out))
    assert.are.equal(0, seen.whole)
    assert.is_true(seen.most <= page, seen.most)

    local of_noisy = {}
    for _, e in ipairs(whole) do if e.step == "noisy" then of_noisy[#of_noisy + 1] = e end end
    code, out, seen = history_cmd(db, id, "--json", "--step", "noisy")
    assert.are.equal(0, code, out)
    assert.are.same(of_noisy, json.decode(out))
    assert.are.equal(0, seen.whole)
    assert.is_true(seen.most <= page, seen.most)

    code, out, seen = history_cmd(db, id, "--json", "--step", "noisy", "--tail", "3")
    assert.are.equal(0, code, out)
    assert.are.same(table.move(of_noisy, #of_noisy - 2, #of_noisy, 1, {}), json.decode(out))
    assert.are.equal(0, seen.whole)

    code, out, seen = history_cmd(db, id, "--json", "--after", "5")
    assert.are.equal(0, code, out)
    assert.are.same(table.move(whole, 6, #whole, 1, {}), json.decode(out))
    assert.are.equal(0, seen.whole)

    -- the text: the whole timeline's lines, times from the run's first row
    code, out, seen = history_cmd(db, id)
    assert.are.equal(0, code, out)
    local n = 0
    for _ in out:gmatch("\n  %+") do n = n + 1 end
    assert.are.equal(#whole, n)
    assert.truthy(out:find("line " .. N .. "\n", 1, true), out:sub(-300))
    assert.are.equal(0, seen.whole)

    -- the chart: the picture mend.chart draws of the whole history
    code, out, seen = history_cmd(db, id, "--chart")
    assert.are.equal(0, code, out)
    local st = eng:status(id)
    local lines = require("mend.chart").lines(st, whole, eng:now())
    assert.truthy(out:find(table.concat(lines, "\n"), 1, true), out)
    assert.are.equal(0, seen.whole)
    assert.is_true(seen.most <= page, seen.most)
  end)

  it("is printed in pages at the end of mend run", function()
    local _, db, _, path = long_run(true)
    local code, out
    local seen = watched(function()
      out = captured(function()
        code = require("mend.cli").main { "run", path, "--db", db, "--clock", "virtual",
                                          "--log-level", "error" }
      end)
    end)
    assert.are.equal(0, code, out)
    local n = 0
    for _ in out:gmatch("\n  %+[^\n]*line %d+") do n = n + 1 end
    assert.are.equal(N, n, out:sub(1, 500))
    assert.truthy(out:find("nap%s+running %-> succeeded"), out:sub(-500))
    assert.are.equal(0, seen.whole)
    assert.is_true(seen.most <= mend.history_page, seen.most)
  end)

  it("refuses page bounds the HTTP API refuses, naming the value", function()
    local _, db, id = long_run()
    local max = tostring(mend.history_page_max)
    for _, bad in ipairs {
      { "--after", "0x10", "%-%-after must be a whole number >= 0 %(a seq%), got 0x10" },
      { "--after", "1e3", "%-%-after must be a whole number >= 0 %(a seq%), got 1e3" },
      { "--after", "99999999999999999999", "%-%-after must be a whole number >= 0" },
      { "--limit", "0", "%-%-limit must be a whole number from 1 to " .. max .. ", got 0" },
      { "--limit", " 5", "%-%-limit must be a whole number from 1 to " .. max .. ", got  5" },
      { "--limit", tostring(mend.history_page_max + 1), "%-%-limit must be a whole number from 1 to " },
      { "--tail", "0x2", "%-%-tail must be a whole number from 1 to " .. max .. ", got 0x2" },
      { "--tail", tostring(mend.history_page_max + 1), "%-%-tail must be a whole number from 1 to " },
    } do
      local rc, out = H.mend_cmd(db, ("history %s %s %s"):format(id, bad[1], H.quote(bad[2])))
      assert.are.equal(2, rc, out)
      assert.matches(bad[3], out)
    end
    local rc, out = H.mend_cmd(db, "history " .. id .. " --limit " .. max .. " --json")
    assert.are.equal(0, rc, out)
  end)

  it("says an unknown run is one, in each form", function()
    local _, db = long_run()
    for _, args in ipairs { "", " --json", " --tail 2", " --chart", " --step noisy" } do
      local rc, out = H.mend_cmd(db, "history nosuchrun" .. args)
      assert.are.equal(1, rc, out)
      assert.matches("no run nosuchrun", out)
    end
  end)
end)

describe("eng:history", function()
  after_each(H.cleanup)

  it("takes the HTTP API's bounds, naming a bad value", function()
    local eng, _, id = long_run()
    local max = mend.history_page_max
    for _, case in ipairs {
      { { limit = 0 }, "limit must be a whole number from 1 to " .. max .. ", got 0" },
      { { limit = max + 1 }, "limit must be a whole number from 1 to " .. max },
      { { tail = 0 }, "tail must be a whole number from 1 to " .. max .. ", got 0" },
      { { tail = max + 1 }, "tail must be a whole number from 1 to " .. max },
      { { after = -1 }, "after must be a whole number >= 0, got %-1" },
      { { after = "0x10" }, 'after must be a whole number >= 0, got the string "0x10"' },
      { { limit = "10" }, 'limit must be a whole number from 1 to ' .. max .. ', got the string "10"' },
      { { tail = 2, limit = 3 }, "tail is the last rows: give it without limit" },
    } do
      local ok, err = pcall(eng.history, eng, id, case[1])
      assert.is_false(ok)
      assert.matches("history: " .. case[2], tostring(err))
    end
    -- without a limit a page has the API's default rows, never the whole history
    assert.are.equal(mend.history_page, #eng:history(id, { after = 0 }))
    assert.are.equal(mend.history_page, #eng:history(id, {}))
    assert.are.equal(#eng:history(id), #eng:history(id, { limit = max }))
  end)

  it("gives nil and a message naming an unknown run, as status gives nil", function()
    local eng, _, id = long_run()
    for _, opts in ipairs { false, { tail = 3 }, { after = 0, limit = 5 } } do
      local h, err = eng:history("no-such-run", opts or nil)
      assert.is_nil(h)
      assert.are.equal("no run no-such-run", err)
    end
    local last = eng:history(id, { tail = 1 })[1].seq
    assert.are.same({}, eng:history(id, { after = last }))   -- a known run past its last row
  end)
end)

describe("mend repl's reports of a long run", function()
  after_each(H.cleanup)

  it("read only the rows after the last seen", function()
    local _, db, _, path = long_run()
    local isatty = mend.isatty
    mend.isatty = function() return false end
    local script = ("use(%q)\nid = start(\"long\")\nadvance(1)\nadvance(20)\n"):format(path)
    local out, seen
    seen = watched(function()
      out = captured(function() return require("mend.repl").main({ db = db, clock = "virtual" }) end,
                     script)
    end)
    mend.isatty = isatty
    local lines = {}
    for l in out:gmatch("line (%d+)\n") do lines[#lines + 1] = tonumber(l) end
    -- each of the new run's log lines reported once, in order (the first run's are not news)
    assert.are.equal(N, #lines, out:sub(1, 2000))
    for i = 1, N do assert.are.equal(i, lines[i]) end
    assert.truthy(out:find("nap%s+running %-> succeeded"), out:sub(-2000))
    assert.are.equal(0, seen.whole)
    -- every row was read about once: the new run's, with a few rows of tails and first rows
    local eng = H.reopen(db)
    local total = 0
    for _, r in ipairs(eng:runs{}) do total = total + #eng:history(r.id) end
    assert.is_true(seen.rows <= total + 20, ("%d rows read of %d"):format(seen.rows, total))
    assert.is_true(seen.most <= mend.history_page, seen.most)
  end)
end)
