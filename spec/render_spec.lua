-- mend.render, the printers the `mend` command and the REPL share: on one database, `mend
-- runs`, `breakers`, `dlq`, `status RUN` and `history RUN` print what the REPL's runs(),
-- breakers(), dlq(), status(id) and history(id) print, line for line. Only what moves with the
-- wall clock between two processes (a dead letter's age, the time left until a breaker
-- half-opens) is masked before the comparison.

local H = require "spec.helper"

local WORKFLOW = [[
local mend = require "mend"
return { name = "shop", retry = { max_attempts = 2, initial = 0.1, jitter = 0 }, steps = {
  { name = "reserve", breaker = "stock",
    execute = function() return { reservation = "r-1" } end,
    compensate = function(ctx, result)
      if ctx.input.mode == "refund_down" then error(mend.retryable("refund service down")) end
    end },
  { name = "charge",
    execute = function(ctx, input)
      if input.mode ~= "ok" then error(mend.fatal("card declined")) end
      return { charge = "c-1" }
    end },
} }
]]

-- stdout of a shell command (its stderr, the log, dropped) and its exit code.
local function stdout_of(cmd)
  return H.shell("(" .. cmd .. " 2>/dev/null)")   -- H.shell sends its stderr to stdout
end

local function cli(db, args)
  local code, out = stdout_of(("%s %s --db %s"):format(H.MEND, args, H.quote(db)))
  assert.are.equal(0, code, out)
  return out
end

local function repl(db, line)
  local code, out = stdout_of(("printf '%%s\\n' %s | %s repl --db %s"):format(H.quote(line),
                                                                            H.MEND, H.quote(db)))
  assert.are.equal(0, code, out)
  return out
end

-- A database with a run of the workflow `script` (written to dir/file) and one of the repo's
-- order.lua; returns the database and the first run's id.
local function named_runs(file, script)
  local dir = H.tmp_dir()
  local db = H.new_db(dir, file .. ".db")
  local wf = H.write_file(dir, file .. ".lua", script)
  local code, out = stdout_of(("%s run %s --db %s --clock virtual"):format(H.MEND, H.quote(wf), H.quote(db)))
  assert.are.equal(0, code, out)
  local id = out:match("run (%w+):")
  code, out = stdout_of(("%s run workflows/order.lua --db %s --clock virtual"):format(H.MEND, H.quote(db)))
  assert.are.equal(0, code, out)
  return db, id
end

-- In the output of `mend ARGS`, the first line holding each name: the column where `after` (a
-- pattern) is first found past the name is the same for both, as measure(text before) counts.
local function assert_aligned(db, measure, args, wide, plain, after)
  local text = cli(db, args)
  local function column(name)
    for line in text:gmatch("[^\n]+") do
      local _, e = line:find(name, 1, true)
      local at = e and line:find(after, e + 1)
      if at then return measure(line:sub(1, at - 1)) end
    end
    error("no line with " .. name .. " in:\n" .. text)
  end
  assert.are.equal(column(plain), column(wide), args .. ":\n" .. text)
end

local function masked(text)
  text = text:gsub("(half%-opens in )[%d.]+s", "%1<left>")
  return (text:gsub("(compensation_failed%s+reserve%s+)%d+[smhd]", "%1<age>"))
end

describe("the CLI and the REPL", function()
  after_each(H.cleanup)

  it("print runs, breakers, dead letters, a status and a timeline alike", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "shop.db")
    local wf = H.write_file(dir, "shop.lua", WORKFLOW)
    local function run(input, expected)
      local code, out = stdout_of(("%s run %s --db %s --clock virtual --input %s"):format(
        H.MEND, H.quote(wf), H.quote(db), H.quote(input)))
      assert.are.equal(expected, code, out)
      return out:match("run (%w+):")
    end
    -- inputs of one field: the order of an object's fields is not the subject here
    local ok = run('{"mode":"ok"}', 0)
    run('{"mode":"declined"}', 3)
    local dead = run('{"mode":"refund_down"}', 4)
    cli(db, "breakers open stock --for 3600")

    local pairs_ = {
      { "runs", "runs()" },
      { "breakers", "breakers()" },
      { "dlq", "dlq()" },
      { "status " .. ok, ("status(%q)"):format(ok) },
      { "status " .. dead, ("status(%q)"):format(dead) },
      { "history " .. dead, ("history(%q)"):format(dead) },
    }
    for _, p in ipairs(pairs_) do
      local from_cli, from_repl = masked(cli(db, p[1])), masked(repl(db, p[2]))
      assert.are.equal(from_cli, from_repl, p[1])
    end
    -- what was compared is there: the tables with their headers, the breaker held open, the
    -- dead letter, the run turning back
    local runs = cli(db, "runs")
    assert.matches("RUN%s+WORKFLOW%s+STATUS%s+ATTENTION%s+CREATED%s+ERROR\n", runs)
    assert.matches(dead .. "%s+shop%s+needs_attention%s+%d+%-", runs)
    assert.matches("stock%s+open%s+0%s+0%s+%d+%-%d+%-%d+ [%d:.]+ UTC %(half%-opens in [%d.]+s%)\n",
                   cli(db, "breakers"))
    assert.matches(dead .. "%s+compensation_failed%s+reserve%s+%d+s%s+retryable: refund service down",
                   cli(db, "dlq"))
    assert.matches("---- turning back: compensating the completed steps in reverse ----",
                   cli(db, "history " .. dead))
  end)
end)

describe("text that workflow code wrote (names, errors, log lines)", function()
  after_each(H.cleanup)

  -- a sandboxed workflow's author is not the operator: what reaches the terminal is shown, not
  -- obeyed, and a row of a table stays one line
  it("is printed with its control characters shown, not sent to the terminal", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "ctl.db")
    local wf = H.write_file(dir, "ctl.lua", [=[
return { name = "ctl\nx", steps = {
  { name = "a\27]0;owned\7", execute = function(ctx)
      ctx:log("one\ntwo")
      error("line1\nline2\27[2J\194\155")
    end } } }
]=])
    local code, out = stdout_of(("%s run %s --db %s --clock virtual"):format(H.MEND, H.quote(wf),
                                                                           H.quote(db)))
    assert.are.equal(3, code, out)
    local id = cli(db, "runs --json"):match('"id":"(%w+)"')
    for _, text in ipairs({ out, cli(db, "runs"), cli(db, "status " .. id),
                            cli(db, "history " .. id), cli(db, "dlq") }) do
      assert.not_matches("[\0-\9\11-\31\127]", text)
      assert.not_matches("\194[\128-\159]", text)
      assert.not_matches("\nline2", text)
      assert.not_matches("\nx", text)
    end
    local runs = cli(db, "runs")
    assert.matches("ctl\\nx%s+failed%s+.*line1\\nline2\\x1b%[2J\\u{9b}\n", runs)
    local history = cli(db, "history " .. id)
    assert.matches("a\\x1b%]0;owned\\x07%s+log: one\\ntwo\n", history)
  end)
end)

describe("text that workflow code wrote, shown by the CLI and the REPL", function()
  after_each(H.cleanup)

  -- U+202E shows the rest of a row reversed on a terminal that lays text out both ways (one
  -- name passes for another), U+2028 breaks a row in a pager; a file that raised as it loaded,
  -- or a value the REPL prints, is workflow text too
  it("spells out the marks a terminal lays out, in errors and in the REPL's values", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "marks.db")
    local wf = H.write_file(dir, "marks.lua", [=[
return { name = "marks", steps = {
  { name = "a\u{202e}b", execute = function() error("x\u{2028}y\u{9b}z\u{2066}") end } } }
]=])
    local code, out = stdout_of(("%s run %s --db %s --clock virtual"):format(H.MEND, H.quote(wf),
                                                                           H.quote(db)))
    assert.are.equal(3, code, out)
    assert.matches("a\\u{202e}b%s+running %-> failed%s+attempt 1%s+error: .*x\\u{2028}y\\u{9b}z\\u{2066}\n",
                   out)
    local id = cli(db, "runs --json"):match('"id":"(%w+)"')
    local value = repl(db, ("eng:status(%q).error"):format(id))
    assert.matches('"error: .*x\\u{2028}y\\u{9b}z\\u{2066}"', value)
    assert.not_matches("\194[\128-\159]", value)
    local bad = H.write_file(dir, "bad.lua", 'error("boom\\27[2J\\n\\226\\128\\174x")')
    local _, err = H.shell(("(%s run %s --db %s 2>&1 >/dev/null)"):format(H.MEND, H.quote(bad),
                                                                     H.quote(db)))
    assert.matches("mend: .*bad%.lua:1: boom\\x1b%[2J\n\\u{202e}x\n", err)
    local _, shown = H.shell(("(printf '%%s\\n' %s | %s repl --db %s)"):format(
      H.quote(("use(%q)"):format(bad)), H.MEND, H.quote(db)))
    assert.matches("error: .*boom\\x1b%[2J\n\\u{202e}x\n", shown)
  end)

  -- A raw 0x9b is CSI on a terminal that is not UTF-8's: the log spelled it, mend's errors
  -- and the REPL's sent it on.
  it("spells out a byte that is not UTF-8 in mend's errors and the REPL's, as the log does",
     function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "bytes.db")
    local bad = H.write_file(dir, "bad.lua", 'error("a\\155[2Jb\\194\\155c\\255\\195")')
    local _, err = H.shell(("(%s run %s --db %s 2>&1 >/dev/null)"):format(H.MEND, H.quote(bad),
                                                                     H.quote(db)))
    assert.matches("mend: .*bad%.lua:1: a\\x9b%[2Jb\\u{9b}c\\xff\\xc3\n", err)
    local _, shown = H.shell(("(printf '%%s\\n' %s | %s repl --db %s)"):format(
      H.quote(("use(%q)"):format(bad)), H.MEND, H.quote(db)))
    assert.matches("error: .*bad%.lua:1: a\\x9b%[2Jb\\u{9b}c\\xff\\xc3\n", shown)
  end)
end)

describe("a database's name as mend shows it (mend wait, the REPL's banner)", function()
  local render = require "mend.render"

  it("drops a PostgreSQL password and keeps the server, the database and the other parameters", function()
    assert.are.equal("postgresql://mend@db.example:5432/jobs",
                     render.db_shown("postgresql://mend:s3cret@db.example:5432/jobs"))
    assert.are.equal("postgres://mend@h/jobs?options=-csearch_path%3Dx",
                     render.db_shown("postgres://mend:s3cret@h/jobs?options=-csearch_path%3Dx"))
    assert.are.equal("postgres://h/jobs?sslmode=require",
                     render.db_shown("postgres://h/jobs?password=s3cret&sslmode=require"))
    assert.are.equal("postgres://h/jobs?sslmode=require",
                     render.db_shown("postgres://h/jobs?sslmode=require&password=s3cret"))
    assert.are.equal("postgresql://", render.db_shown("postgresql://"))
    assert.are.equal("jobs.db", render.db_shown("jobs.db"))
    assert.are.equal("user:pw@odd.db", render.db_shown("user:pw@odd.db"))   -- a file's name as it is
  end)
end)

describe("a timeline", function()
  after_each(H.cleanup)

  it("writes times past an hour in hours, minutes and seconds", function()
    local dir = H.tmp_dir()
    local wf = H.write_file(dir, "nap.lua", [[
return { name = "nap", steps = {
  { name = "nap", sleep = 2 * 3600 + 61.5 },
  { name = "done", execute = function() return 1 end } } }
]])
    local code, out = stdout_of(("%s run %s --db %s --clock virtual"):format(
      H.MEND, H.quote(wf), H.quote(H.new_db(dir, "nap.db"))))
    assert.are.equal(0, code, out)
    assert.matches("%+2h01m01%.500s%s+done", out)
    assert.is_nil(out:find("%+%d%d%d+m"), out)
  end)
end)

describe("tables with names beyond ASCII", function()
  after_each(H.cleanup)

  it("keep their columns aligned: runs, breakers, workflows, a status's steps and a timeline", function()
    local db, id = named_runs("names", [[
return { name = "bücher-café", steps = {
  { name = "prüfen", breaker = "zahlung-ü", execute = function() return 1 end },
  { name = "ok", execute = function() return 2 end } } }
]])
    local function aligned(...) assert_aligned(db, utf8.len, ...) end   -- in characters
    aligned("runs", "bücher-café", "order ", "succeeded")
    aligned("breakers", "zahlung-ü", "charge", "closed")
    aligned("workflows", "bücher-café", "order ", "%d%d%d%d%-%d%d%-%d%d")
    aligned("status " .. id, " prüfen", " ok", "succeeded")
    aligned("history " .. id, " prüfen", " ok ", "pending")
  end)
end)

describe("mend.render.write_json", function()
  -- A document too large for one encoding is encoded in parts; a part that cannot be encoded
  -- is named by its place in the whole, as mend.json names it (a key with `%` in it too).
  it("names where a value that cannot be encoded is, in a document opened in parts", function()
    local render = require "mend.render"
    local filler = {}
    for i = 1, 600000 do filler[i] = i end
    local ok, err = pcall(render.write_json, { ["50%"] = { x = 0 / 0 }, filler = filler })
    assert.is_false(ok)
    assert.matches('^mend%.json%.encode: value%["50%%"%]%.x: cannot encode NaN', err)
  end)
end)

-- A terminal shows an East Asian wide character in two columns and a combining mark in none:
-- counted as code points, a CJK name or a decomposed accent (NFD, as macOS file names give)
-- pushed the columns after it askew.
describe("tables with wide or combining characters", function()
  after_each(H.cleanup)

  -- Display columns of UTF-8 text: combining marks (U+0300-036F) none, CJK/Hangul/fullwidth two.
  local function width(s)
    local w = 0
    for _, c in utf8.codes(s) do
      if c >= 0x300 and c <= 0x36F then w = w + 0
      elseif (c >= 0x1100 and c <= 0x115F) or (c >= 0x2E80 and c <= 0xA4CF) or
             (c >= 0xAC00 and c <= 0xD7A3) or (c >= 0xF900 and c <= 0xFAFF) or
             (c >= 0xFF00 and c <= 0xFF60) or (c >= 0xFFE0 and c <= 0xFFE6) then w = w + 2
      else w = w + 1 end
    end
    return w
  end

  it("keep their columns aligned on a terminal", function()
    local db, id = named_runs("wide", [[
return { name = "注文処理", steps = {
  { name = "cafe\u{301}", execute = function() return 1 end },
  { name = "ok", execute = function() return 2 end } } }
]])
    local function aligned(...) assert_aligned(db, width, ...) end
    aligned("status " .. id, " cafe\u{301}", " ok", "succeeded")
    aligned("runs", "注文処理", "order ", "succeeded")
    aligned("workflows", "注文処理", "order ", "%d%d%d%d%-%d%d%-%d%d")
  end)

  -- A name wider than its column widens it for every row (one table printer, mend.render):
  -- it pushed the rest of its own row askew.
  it("keep their columns aligned when a name is wider than its column", function()
    local db = named_runs("wider", [[
return { name = "注文処理と請求書の発行-über", steps = {
  { name = "reserve", breaker = "支払いサービス-ゲートウェイ", execute = function() return 1 end },
  { name = "ok", execute = function() return 2 end } } }
]])
    local function aligned(...) assert_aligned(db, width, ...) end
    aligned("runs", "注文処理と請求書の発行-über", "order ", "succeeded")
    aligned("workflows", "注文処理と請求書の発行-über", "order ", "%d%d%d%d%-%d%d%-%d%d")
    aligned("breakers", "支払いサービス-ゲートウェイ", "charge", "closed")
  end)
end)

-- `mend history RUN --chart` (mend.chart) pads its lane names by a terminal's columns and cuts
-- them at a character's edge: padded by bytes, a step name beyond ASCII moved its bars left of
-- the others, and one cut at its 24th byte was printed as half a character (invalid UTF-8).
describe("mend history --chart with step names beyond ASCII", function()
  after_each(H.cleanup)

  it("keeps the bars aligned and prints whole characters", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "chart.db")
    local wf = H.write_file(dir, "chart.lua", [[
return { name = "chart", steps = {
  { name = "prüfen", execute = function() return 1 end },
  { name = "ok", execute = function() return 2 end },
  { name = "abcdefghijklmnopqrstuvwä-more", execute = function() return 3 end } } }
]])
    local code, out = stdout_of(("%s run %s --db %s --clock virtual"):format(H.MEND, H.quote(wf), H.quote(db)))
    assert.are.equal(0, code, out)
    local id = out:match("run (%w+):")
    local text = cli(db, "history " .. id .. " --chart")
    local bars = {}
    for line in text:gmatch("[^\n]+") do
      assert.truthy(utf8.len(line), "not UTF-8: " .. line)
      local at = line:find("|", 1, true)
      if at then bars[#bars + 1] = utf8.len(line:sub(1, at - 1)) or -1 end
    end
    assert.are.equal(3, #bars, text)
    assert.are.same({ bars[1], bars[1], bars[1] }, bars, text)
  end)
end)
