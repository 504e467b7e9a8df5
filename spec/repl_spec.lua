-- `mend repl`: a session read from stdin (a script, as a person would type it) with its
-- expected output; the helpers (help, cancel, dlq_retry, resolve, Lua's load left alone,
-- errors on the user's line) against real runs; the README's walk-through replayed from the
-- README; the pretty printer and the completion function on their own; and the interactive
-- REPL driven in a real terminal through tmux: line editing, completion, and the history
-- file across sessions.
-- The binary is $MEND_BIN (ctest sets it), else /work/main/build/mend.

local mend = require "mend"
local repl = require "mend.repl"
local json = mend.json

local MEND = os.getenv("MEND_BIN") or "/work/main/build/mend"
local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."

local H = require "spec.helper"
local quote, slurp = H.quote, H.slurp

-- Runs `mend repl ARGS` from the repository root with `script` on stdin; returns the exit
-- code, stdout and stderr.
local function repl_run(script, ...)
  local words = {}
  for i, a in ipairs({ ... }) do words[i] = quote(a) end
  local infile, errfile = os.tmpname(), os.tmpname()
  local f = assert(io.open(infile, "w"))
  f:write(script)
  f:close()
  local cmd = ("cd %s && %s repl %s <%s 2>%s"):format(quote(ROOT), quote(MEND),
    table.concat(words, " "), quote(infile), quote(errfile))
  local p = assert(io.popen(cmd, "r"))
  local stdout = p:read("a")
  local _, _, code = p:close()
  local stderr = slurp(errfile)
  os.remove(infile)
  os.remove(errfile)
  return code, stdout, stderr
end

-- Run ids become <run1>, <run2>... in order of appearance; wall-clock dates become <time>;
-- JSON objects of the status lines are printed with sorted keys.
local function normalize(text)
  local ids, n = {}, 0
  text = text:gsub("%f[%w](0[%w][%w][%w][%w][%w][%w][%w][%w][%w][%w][%w][%w][%w][%w][%w])%f[^%w]",
    function(id)
      if not ids[id] then n = n + 1; ids[id] = ("<run%d>"):format(n) end
      return ids[id]
    end)
  text = text:gsub("%d%d%d%d%-%d%d%-%d%d %d%d:%d%d:%d%d%.%d%d%d UTC", "<time>")
  text = text:gsub("result (%b{})", function(obj) return "result " .. repl.pretty(json.decode(obj)) end)
  return text
end

local function lines(text)
  local out = {}
  for line in text:gmatch("[^\n]*") do out[#out + 1] = line end
  return out
end

describe("mend repl reading a script from stdin", function()
  it("loads a workflow, starts a run, advances the clock and inspects it", function()
    local code, stdout, stderr = repl_run([[
use "playground"
playground.break_payments(2)
id = start("playground", { amount = 30 })
advance(1)
advance(2)
advance(1)
status(id)
history(id)
eng:status(id).steps[2].attempts
show({ b = { 2, 1 }, a = "x" })
]], "--seed", "1")
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    assert.are.same(lines([[
"playground"
playground run <run1>: running
  +0.000s    (run)            new -> running
  +0.000s    reserve          pending -> running            attempt 1
advanced 1s: clock +1.000s, 1 run in flight
playground run <run1>: running
  +0.050s    reserve          log: reserved res-1
  +0.050s    reserve          running -> succeeded          attempt 1
  +0.050s    charge           pending -> running            attempt 1
  +0.250s    charge           running -> retry_wait         attempt 1  delay 1s  retryable: payments: injected failure (call 1)
advanced 2s: clock +3.000s, 1 run in flight
playground run <run1>: running
  +1.250s    charge           retry_wait -> pending         attempt 1
  +1.250s    charge           pending -> running            attempt 2
  +1.450s    charge           running -> retry_wait         attempt 2  delay 2s  retryable: payments: injected failure (call 2)
advanced 1s: clock +4.000s, 0 runs in flight
playground run <run1>: succeeded
  +3.450s    charge           retry_wait -> pending         attempt 2
  +3.450s    charge           pending -> running            attempt 3
  +3.650s    charge           log: charged 30 (ch-3)
  +3.650s    charge           running -> succeeded          attempt 3
  +3.650s    ship             pending -> running            attempt 1
  +3.750s    ship             log: shipped, tracking trk-1
  +3.750s    ship             running -> succeeded          attempt 1
  +3.750s    (run)            running -> succeeded
playground run <run1>: succeeded
  input    {"amount":30}
  created  <time>
  updated  <time>
steps:
   1 reserve          succeeded            attempts 1  result { order = "o-1", reservation = "res-1" }
   2 charge           succeeded            attempts 3  result { amount = 30, charge_id = "ch-3" }
   3 ship             succeeded            attempts 1  result { tracking = "trk-1" }
playground run <run1>: succeeded
timeline:
  +0.000s    (run)            new -> running
  +0.000s    reserve          pending -> running            attempt 1
  +0.050s    reserve          log: reserved res-1
  +0.050s    reserve          running -> succeeded          attempt 1
  +0.050s    charge           pending -> running            attempt 1
  +0.250s    charge           running -> retry_wait         attempt 1  delay 1s  retryable: payments: injected failure (call 1)
  +1.250s    charge           retry_wait -> pending         attempt 1
  +1.250s    charge           pending -> running            attempt 2
  +1.450s    charge           running -> retry_wait         attempt 2  delay 2s  retryable: payments: injected failure (call 2)
  +3.450s    charge           retry_wait -> pending         attempt 2
  +3.450s    charge           pending -> running            attempt 3
  +3.650s    charge           log: charged 30 (ch-3)
  +3.650s    charge           running -> succeeded          attempt 3
  +3.650s    ship             pending -> running            attempt 1
  +3.750s    ship             log: shipped, tracking trk-1
  +3.750s    ship             running -> succeeded          attempt 1
  +3.750s    (run)            running -> succeeded
3
{ a = "x", b = { 2, 1 } }
]]), lines(normalize(stdout)))
  end)

  it("shows a broken dependency tripping its breaker, then the run in the dead-letter queue",
     function()
    local code, stdout, stderr = repl_run([[
use "playground"
playground.break_payments()
id = start("playground", { order = "o-3" })
advance(5)
breakers()
run()
status(id)
dlq()
]], "--seed", "1")
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    local out = normalize(stdout)
    assert.truthy(out:find("advanced 5s: clock +5.000s, 1 run in flight", 1, true))
    assert.truthy(out:find("charge           breaker payments closed -> open", 1, true))
    assert.truthy(out:find("\npayments%s+open%s+0%s+0%s+<time> %(half%-opens in [%d.]+s%)\n"))
    assert.truthy(out:find("---- turning back: compensating the completed steps in reverse ----",
                           1, true))
    assert.truthy(out:find("reserve          log: released res-1", 1, true))
    assert.truthy(out:find("ran until nothing was in flight: clock +", 1, true))
    assert.truthy(out:find("playground run <run1>: needs_attention\n", 1, true))
    assert.truthy(out:find("   2 charge           failed               attempts 6", 1, true))
    assert.truthy(out:find("<run1>%s+attempts_exhausted%s+charge%s+%d+[smhd]%s+retryable: payments: "
                           .. "injected random failure"))
  end)

  it("continues an incomplete chunk on the next line, as lua.c does", function()
    local code, stdout, stderr = repl_run(table.concat({
      "1 +", "  2", "for i = 1, 2 do", "  print('line ' .. i)", "end", "t = {", "  x = 1,",
      "}", "t.x", "local function f()", "  return 'f'", "end", "" }, "\n"))
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    assert.are.equal("3\nline 1\nline 2\n1\n", stdout)
  end)

  it("reports errors on stderr, goes on with the next chunk, and exits 1", function()
    local code, stdout, stderr = repl_run(table.concat({
      "nosuch()", "x = = 1", "error(mend.fatal('card declined'))", "status('zzz')", "'still here'",
      "if true then", "" }, "\n"))
    assert.are.equal(1, code)
    assert.are.equal('"still here"\n', stdout)
    assert.are.same({
      "error: stdin:1: attempt to call a nil value (global 'nosuch')",
      "error: stdin:1: unexpected symbol near '='",
      "error: fatal: card declined",
      "error: stdin:1: status: no run zzz",
      "error: stdin:1: 'end' expected near <eof>",
      "",
    }, lines(stderr))
  end)

  it("prints every value a chunk returns, and nothing for statements", function()
    local code, stdout = repl_run('x = 1\nx, "two", nil, { 3 }\nprint("p")\n')
    assert.are.equal(0, code)
    assert.are.equal('1\n"two"\nnil\n{ 3 }\np\n', stdout)
  end)

  it("refuses advance on a real clock, and run() works there", function()
    local code, stdout, stderr = repl_run(
      'use "playground"\nid = start("playground")\nadvance(1)\nrun()\n', "--clock", "real")
    assert.are.equal(1, code)
    assert.are.equal("error: stdin:1: advance needs the virtual clock (mend repl --clock virtual);"
                     .. " use run()\n", stderr)
    assert.truthy(stdout:find("ran until nothing was in flight", 1, true))
    assert.truthy(normalize(stdout):find("playground run <run1>: succeeded", 1, true))
  end)

  it("uses the database given with --db, which the other commands then read", function()
    local db = os.tmpname()
    local code, stdout = repl_run('use "playground"\nstart("playground")\nrun()\n', "--db", db)
    assert.are.equal(0, code)
    local id = stdout:match('\n"(0%w+)"\n')
    assert.truthy(id)
    local p = assert(io.popen(("%s status %s --db %s"):format(quote(MEND), id, quote(db))))
    local status_out = p:read("a")
    p:close()
    assert.truthy(status_out:find("playground run " .. id .. ": succeeded", 1, true))
    for _, s in ipairs({ "", "-wal", "-shm", "-journal" }) do os.remove(db .. s) end
  end)

  -- as `mend start NAME` refuses it: a file of workflows/ that declares NAME is what a worker
  -- serving the folder runs under that name, not workflows/NAME.lua's other workflow
  it("start(NAME) refuses when workflows/NAME.lua declares another and a file declares NAME",
     function()
    local dir = H.tmp_dir()
    assert(require("lfs").mkdir(dir .. "/workflows"))
    local src = "return { name = '%s', steps = { { name = 'a', execute = function() " ..
                "return 1 end } } }"
    H.write_file(dir .. "/workflows", "invoice.lua", src:format("billing"))
    H.write_file(dir .. "/workflows", "new.lua", src:format("invoice"))
    local errfile = os.tmpname()
    local p = assert(io.popen(("cd %s && echo 'start(\"invoice\")' | %s repl 2>%s")
      :format(quote(dir), quote(MEND), quote(errfile))))
    local stdout = p:read("a")
    p:close()
    local stderr = slurp(errfile)
    os.remove(errfile)
    H.cleanup()
    assert.are.equal("", stdout)
    assert.are.equal("error: stdin:1: start: workflows/invoice.lua declares workflow billing, "
                     .. "and workflows/new.lua declares workflow invoice: give the file to start\n",
                     stderr)
  end)

  it("lists its helpers with help(), and has usage and help as a command", function()
    local code, stdout = repl_run("help()\n")
    assert.are.equal(0, code)
    for _, name in ipairs({ "use(path)", "start(name, input, opts)", "advance(seconds)", "run()",
                            "status(id)", "history(id)", "dlq()", "breakers()", "show(value, ...)",
                            "sim" }) do
      assert.truthy(stdout:find(name, 1, true), name)
    end
    local p = assert(io.popen(quote(MEND) .. " repl --help"))
    local help = p:read("a")
    p:close()
    assert.truthy(help:find("usage: mend repl [--db PATH] [--clock virtual|real] [--seed N]", 1, true))
    p = assert(io.popen(quote(MEND) .. " repl --clock sundial 2>&1"))
    local bad = p:read("a")
    local _, _, rc = p:close()
    assert.are.equal(2, rc)
    assert.truthy(bad:find("mend: bad value for --clock: sundial", 1, true))
  end)
end)

describe("the REPL's helpers", function()
  after_each(H.cleanup)

  it("describes each helper with help(fn): a paragraph and an example that compiles", function()
    local entries = repl.help_entries
    assert.truthy(#entries >= 16)
    local script = {}
    for _, h in ipairs(entries) do
      assert.truthy(#h.text > 60, h.name)
      assert.truthy(load(h.example, "=example") or load("return " .. h.example, "=example"),
                    h.name .. ": " .. h.example)
      script[#script + 1] = ("help(%s)"):format(h.name)
    end
    script[#script + 1] = 'help "dlq_retry"'
    local code, stdout, stderr = repl_run(table.concat(script, "\n") .. "\n")
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    local from = 1
    for _, h in ipairs(entries) do
      -- usage line, the paragraph indented, "example:", the example: in the order asked for
      local i, j = stdout:find(h.usage .. "\n  ", from, true)
      assert.truthy(i, h.name)
      local e = stdout:find("\nexample:\n  " .. h.example .. "\n", j, true)
      assert.truthy(e, h.name)
      from = e
    end
    assert.truthy(stdout:find("dlq_retry(id)\n  Takes a run out of the dead-letter queue", from, true))
  end)

  it("runs the examples that start a run as written, in a fresh session", function()
    -- start("playground") found no workflow: the examples of start, signal and cancel needed
    -- a use "playground" (use "quest") that they do not show
    for _, name in ipairs { "start", "signal", "cancel" } do
      local example
      for _, h in ipairs(repl.help_entries) do
        if h.name == name then example = h.example end
      end
      local code, stdout, stderr = repl_run(example .. "\nprint(eng:status(id).status)\n", "--seed", "1")
      assert.are.equal(0, code, name)
      assert.is_nil((stdout .. stderr):find("error: stdin", 1, true), name .. ": " .. stdout .. stderr)
      assert.truthy(stdout:find("\n(%a+)\n$"), name .. ": " .. stdout)
    end
  end)

  it("lists every helper with help(), cancel, dlq_retry and resolve among them", function()
    local _, stdout = repl_run("help()\n")
    for _, h in ipairs(repl.help_entries) do
      assert.truthy(stdout:find("\n  " .. h.usage, 1, true), h.usage)
    end
    assert.truthy(stdout:find("sends an event to a run; a step wait_for = name takes it", 1, true))
  end)

  it("keeps Lua's own load, and loads workflows with use", function()
    local code, stdout, stderr = repl_run(table.concat({
      'load("return 6 * 7")()', "rawequal(load, _G.load)", 'use "playground"',
      'use "workflows/order.lua"', "help(load)", "" }, "\n"))
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    assert.are.same({ "42", "true", '"playground"', '"order"',
                      "load is Lua's own: see the Lua 5.4 manual (https://www.lua.org/manual/5.4/)",
                      "" }, lines(stdout))
  end)

  it("names the user's line in errors, never one of its own", function()
    local code, stdout, stderr = repl_run(table.concat({
      "x = 1",
      "if x then",
      "  start(42)",
      "end",
      "cancel('nosuch')",
      "use 'playground'",
      "function f(id)",
      "  status(id)",
      "end",
      "f('zzz')",
      "advance(-1)",
      "advance(0/0)",
      "advance(math.huge)",
      "start('nosuch')",
      "id = start('playground'); run()",
      "cancel(id)",
      "local ok, e = pcall(dlq_retry, id); print(e)",
      "resolve(id)",
      "signal(id)",
      "help(42)",
      "" }, "\n"))
    assert.are.equal(1, code)
    assert.truthy(stdout:find("stdin:1: dlq_retry: run %w+ is succeeded: only a run in the "
                              .. "dead%-letter queue can be retried\n"))
    local errs = lines(normalize(stderr))
    assert.are.same({
      "error: stdin:2: start: a workflow name expected",
      "error: stdin:1: cancel: no run nosuch",
      "error: stdin:2: status: no run zzz",
      "error: stdin:1: advance: seconds must be a finite number >= 0",
      "error: stdin:1: advance: seconds must be a finite number >= 0",
      "error: stdin:1: advance: seconds must be a finite number >= 0",
      'error: stdin:1: start: no workflow named "nosuch" is loaded',
      "error: stdin:1: cancel: run <run1> is succeeded: only a running run can be cancelled",
      'error: stdin:1: resolve: a note saying what was done expected: resolve(id, "refunded by hand")',
      'error: stdin:1: signal: an event name expected: signal(id, "boss_killed", data)',
      "error: stdin:1: help: 42 is not one of the REPL's helpers; help() lists them",
      "",
    }, errs)
    assert.falsy(stderr:find("repl.lua", 1, true))
  end)

  -- The operations against real runs in a database file, checked afterwards by the mend
  -- command as another process would see them.
  it("cancels a running run, retries a dead letter and resolves one with a note", function()
    local db = H.new_db()
    local code, stdout, stderr = repl_run([[
use "playground"
c = start("playground"); advance(0.1)
cancel(c); run()
playground.break_shipping()
r = start("playground"); advance(1)
playground.break_payments()
run()
eng:status(r).status, eng:status(r).reason
playground.fix_payments()
dlq_retry(r); run()
playground.fix_shipping(); playground.break_payments()
d = start("playground"); run()
resolve(d, "told the customer; order dropped")
#eng:dlq()
print(c, r, d)
]], "--db", db, "--seed", "1")
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    local c, r, d = stdout:match("\n(0%w+)\t(0%w+)\t(0%w+)\n$")
    assert.truthy(c, stdout)
    assert.truthy(stdout:find('\n"needs_attention"\n"compensation_failed"\n', 1, true))
    assert.truthy(stdout:find("\n0\n", 1, true))     -- the queue is empty at the end

    local function mend_json(...)
      local p = assert(io.popen(table.concat({ quote(MEND), ... }, " ") .. " --json --db "
                                .. quote(db)))
      local text = p:read("a")
      p:close()
      return json.decode(text)
    end
    local function operator_notes(id)
      local notes = {}
      for _, e in ipairs(mend_json("history", id)) do
        if e.event == "operator" then notes[#notes + 1] = e end
      end
      return notes
    end

    local st = mend_json("status", c)
    assert.are.equal("compensated", st.status)
    assert.are.equal("cancelled", st.reason)
    assert.are.equal("compensated", st.steps[1].status)
    assert.truthy(json.encode(operator_notes(c)):find("cancel", 1, true))

    st = mend_json("status", r)
    assert.are.equal("compensated", st.status)
    assert.are.equal("compensated", st.steps[2].status)     -- the refund, retried
    assert.are.equal("compensated", st.steps[1].status)
    assert.truthy(json.encode(operator_notes(r)):find("dlq retry", 1, true))

    st = mend_json("status", d)
    assert.are.equal("resolved", st.status)
    local notes = json.encode(operator_notes(d))
    assert.truthy(notes:find("dlq resolve", 1, true))
    assert.truthy(notes:find("told the customer; order dropped", 1, true))
    assert.truthy(notes:find("(mend repl)", 1, true))
  end)
end)

-- The README's walk-through of the REPL, as printed there: each line typed in turn, and what
-- its comment says checked in the output, in order.
describe("the README's REPL walk-through", function()
  it("does what each line says: a success, a cancel, two dead letters retried and resolved",
     function()
    local readme = slurp(ROOT .. "/README.md")
    local block = readme:match("\n%$ %./build/mend repl %-%-seed 1\n(.-)\n```")
    assert.truthy(block, "the walk-through block in README.md")
    local typed = {}
    for line in block:gmatch("[^\n]+") do
      local code = line:match("^mend> (.*)$")
      if code then typed[#typed + 1] = code end
    end
    assert.are.equal(18, #typed)
    local code, stdout, stderr = repl_run(table.concat(typed, "\n") .. "\n", "--seed", "1")
    assert.are.equal("", stderr)
    assert.are.equal(0, code)
    local out = normalize(stdout)
    local from = 1
    local function next_is(text, pattern)
      local i, j = out:find(text, from, not pattern)
      assert.truthy(i, ("after offset %d: %s\n%s"):format(from, text, out:sub(from, from + 3000)))
      from = j + 1
    end
    next_is('"playground"\n')
    next_is("playground run <run1>: succeeded\n")
    next_is("  +0.050s    charge           pending -> running            attempt 1\n")
    next_is("playground run <run2>: compensating\n")
    next_is("operator  cancel by ")
    next_is("reserve          log: released res-2")
    next_is("(run)            compensating -> compensated   (cancelled)")
    next_is("  +0.250s    charge           log: charged 42 (ch-3)")
    next_is("ship             running -> retry_wait         attempt 1")
    next_is("playground run <run3>: needs_attention\n")
    next_is("charge           compensating -> compensation_failed")
    next_is("dead letter: compensation_failed")
    next_is("\n<run3>  compensation_failed   charge ")                       -- dlq()
    next_is("operator  dlq retry by ")
    next_is("charge           log: refunded ch-3")
    next_is("(run)            compensating -> compensated   (compensation_failed)")
    next_is("advanced 5s: ")
    next_is("  +1.450s    charge           running -> retry_wait         attempt 2  delay 2s")
    next_is("charge           breaker payments closed -> open\n  +3.650s    charge           "
            .. "running -> retry_wait         attempt 3")
    next_is("\npayments%s+open%s+0%s+0%s+<time> %(half%-opens in 8%.65s%)\n", true)
    next_is("playground run <run4>: needs_attention\n")
    next_is("log: released res-6")
    next_is("dead letter: attempts_exhausted")
    next_is("\n<run4>  attempts_exhausted    charge ")                         -- dlq()
    next_is("playground run <run4>: resolved\n")
    next_is("(run)            needs_attention -> resolved   (told the customer; order dropped)")
    next_is("playground run <run4>: resolved\n  error: [^\n]+\ntimeline:\n", true)  -- history(id)
    next_is("dlq resolve by [^\n]+: told the customer; order dropped\n$", true)
  end)
end)

describe("the REPL's pretty printer", function()
  it("prints scalars as Lua literals", function()
    assert.are.equal('"a\\nb\\"c"', repl.pretty('a\nb"c'))
    assert.are.equal("42", repl.pretty(42))
    assert.are.equal("1.5", repl.pretty(1.5))
    assert.are.equal("nil", repl.pretty(nil))
    assert.are.equal("null", repl.pretty(json.null))
  end)

  it("prints the array part first, then keys sorted, on one line when it fits", function()
    assert.are.equal('{ "a", "b", [10] = true, ["end"] = 3, x = 1, ["y z"] = 2 }',
      repl.pretty({ "a", "b", x = 1, ["y z"] = 2, [10] = true, ["end"] = 3 }))
    assert.are.equal("{}", repl.pretty({}))
  end)

  it("breaks long tables over nested, indented lines", function()
    local long = ("x"):rep(90)
    assert.are.equal(table.concat({
      "{",
      "  a = 1,",
      "  b = {",
      '    "' .. long .. '",',
      "  },",
      "}" }, "\n"), repl.pretty({ a = 1, b = { long } }))
  end)

  it("marks cycles instead of looping", function()
    local t = { name = "t" }
    t.self = t
    assert.are.equal('{ name = "t", self = <cycle> }', repl.pretty(t))
  end)
end)

describe("the REPL's completion", function()
  local env = setmetatable({ eng = mend.engine{ clock = "virtual" }, mend = mend,
                             advance = function() end }, { __index = _G })
  teardown(function() env.eng:close() end)

  it("completes fields of mend", function()
    assert.are.same({ "mend.retryable" }, repl.complete(env, "mend.ret"))
    assert.are.same({ "mend.json.decode" }, repl.complete(env, "mend.json.dec"))
  end)

  it("completes the engine's methods after a colon", function()
    assert.are.same({ "eng:start", "eng:status", "eng:stop" }, repl.complete(env, "eng:st"))
  end)

  it("completes globals, helpers and keywords, keeping what precedes the word", function()
    assert.are.same({ "advance" }, repl.complete(env, "adv"))
    assert.are.same({ "x=mend.fatal" }, repl.complete(env, "x=mend.fat"))
    assert.truthy(#repl.complete(env, "pr") >= 1)
    assert.are.same({ "function" }, repl.complete(env, "functio"))
    assert.are.same({}, repl.complete(env, "nosuch.x"))
  end)
end)

-- A terminal of a test's own: a tmux server on its own socket (no configuration file) running
-- `mend repl` in a session, keys sent as a person types them, the screen read back.
local function terminal()
  local sys = require "system"
  local t = { sock = os.tmpname() }   -- the server's socket: a path of our own, removed by close
  local tmux = "tmux -S " .. quote(t.sock) .. " -f /dev/null "

  local function sh(cmd)
    local p = assert(io.popen(cmd .. " 2>&1"))
    local out = p:read("a")
    local ok = p:close()
    return out, ok
  end

  function t.keys(...)
    local words = {}
    for i, k in ipairs({ ... }) do words[i] = quote(k) end
    sh(tmux .. "send-keys -t repl " .. table.concat(words, " "))
  end

  function t.type_text(text) sh(tmux .. "send-keys -t repl -l " .. quote(text)) end

  function t.screen() return (sh(tmux .. "capture-pane -p -t repl -S -200")) end

  -- capture-pane drops trailing blanks: a prompt reads "mend>" until something is typed.
  -- Waits until the screen has `text` (plain) `count` times (default once); returns the screen.
  function t.wait_for(text, count)
    count = count or 1
    local deadline, s = sys.gettime() + 10, ""
    while sys.gettime() < deadline do
      s = t.screen()
      local n, from = 0, 1
      while true do
        local i, j = s:find(text, from, true)
        if not i then break end
        n, from = n + 1, j + 1
      end
      if n >= count then return s end
      sys.sleep(0.05)
    end
    error(("timed out waiting for %q (x%d); screen:\n%s"):format(text, count, s))
  end

  -- Starts `env mend repl --seed 1` from the repository's root in the session "repl", with a
  -- home of its own (that does not exist), and waits for its prompt.
  function t.start(env)
    local _, found = sh("command -v tmux")
    assert(found, "tmux is needed for this test (make deps installs it)")
    local home = os.tmpname()
    os.remove(home)
    local cmd = ("cd %s && HOME=%s TERM=xterm %s %s repl --seed 1"):format(quote(ROOT),
      quote(home), env or "", quote(MEND))
    local out, ok = sh(tmux .. "new-session -d -s repl -x 120 -y 40 " .. quote(cmd))
    assert(ok, out)
    t.wait_for("mend>")
  end

  -- Sends Ctrl-D and waits until the REPL has left (its session ends with it).
  function t.leave()
    t.keys("C-d")
    local deadline = sys.gettime() + 10
    while sys.gettime() < deadline do
      local _, alive = sh(tmux .. "has-session -t repl")
      if not alive then return end
      sys.sleep(0.05)
    end
    error("the REPL did not leave on Ctrl-D:\n" .. t.screen())
  end

  function t.close()
    sh(tmux .. "kill-server")
    os.remove(t.sock)
  end

  return t
end

describe("mend repl in a terminal", function()
  local term = terminal()
  local keys, type_text, wait_for = term.keys, term.type_text, term.wait_for
  local histfile = os.tmpname()

  setup(function() term.start("MEND_HISTFILE=" .. quote(histfile)) end)

  teardown(function()
    term.close()
    os.remove(histfile)
  end)

  it("edits the line: Ctrl-A goes to its start, Left moves back a character", function()
    type_text("20 + 2)")
    keys("C-a")
    type_text("math.max(")
    keys("Enter")
    local s = wait_for("\n22\n")
    assert.truthy(s:find("mend> math.max(20 + 2)\n22\n", 1, true))
    type_text("1")
    keys("Left")
    type_text("4")
    keys("Enter")
    s = wait_for("\n41\n")
    assert.truthy(s:find("mend> 41\n41\n", 1, true))
  end)

  it("recalls earlier lines with Up", function()
    keys("Up", "Up", "Enter")
    local s = wait_for("\n22\n", 2)
    assert.truthy(select(2, s:gsub("mend> math%.max%(20 %+ 2%)\n22\n", "")) == 2)
  end)

  it("completes mend fields with TAB", function()
    type_text("mend.ret")
    keys("Tab")
    wait_for("mend> mend.retryable")
    type_text('("boom")')
    keys("Enter")
    wait_for('{ kind = "retryable", message = "boom" }')
  end)

  it("completes the engine's methods, listing them when there are several", function()
    type_text("eng:adv")
    keys("Tab")
    wait_for("mend> eng:advance")
    keys("C-u")
    type_text("eng:st")
    keys("Tab", "Tab")
    local s = wait_for("eng:status")
    assert.truthy(s:find("eng:start", 1, true))
    assert.truthy(s:find("eng:stop", 1, true))
    keys("C-u")
  end)

  it("continues an incomplete chunk with a continuation prompt", function()
    type_text("for i = 1, 2 do")
    keys("Enter")
    wait_for("...>")
    type_text("print('iteration ' .. i)")
    keys("Enter")
    type_text("end")
    keys("Enter")
    wait_for("iteration 2")
  end)

  -- Ctrl-C had ended the REPL (SIGINT's default), and the session's in-memory database with it.
  it("abandons the chunk being typed on Ctrl-C and stays", function()
    type_text("for i = 1, 2 do")
    keys("Enter")
    wait_for("...>")
    keys("C-c")
    wait_for("^C")
    type_text("print('still ' .. 'here')")
    keys("Enter")
    local s = wait_for("\nstill here\n")
    assert.falsy(s:find("iteration", s:find("^C", 1, true), true))
  end)

  it("runs the playground with the virtual clock, and leaves on Ctrl-D", function()
    type_text('use "playground"; id = start("playground"); advance(5)')
    keys("Enter")
    wait_for("  +0.350s    (run)            running -> succeeded")
    term.leave()
  end)
end)

describe("mend repl's history", function()
  local histfile = os.tmpname()
  os.remove(histfile)
  local term

  after_each(function()
    if term then term.close() end
    term = nil
    H.cleanup()
  end)

  teardown(function() os.remove(histfile) end)

  -- libedit's history file: a header line, then one line per entry, with spaces, newlines and
  -- backslashes written as octal escapes.
  local function entries(path)
    local text = slurp(path)
    local out = {}
    for line in text:gmatch("[^\n]+") do
      out[#out + 1] = line:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end)
    end
    assert.are.equal("_HiStOrY_V2_", table.remove(out, 1))
    return out
  end

  it("is written to MEND_HISTFILE as lines are typed, readable by its owner only", function()
    term = terminal()
    term.start("MEND_HISTFILE=" .. quote(histfile))
    term.type_text("6 * 7")
    term.keys("Enter")
    term.wait_for("\n42\n")
    term.type_text("for i = 1, 2 do")
    term.keys("Enter")
    term.type_text("print('pass ' .. i) end")
    term.keys("Enter")
    term.wait_for("pass 2")
    term.leave()
    assert.are.same({ "6 * 7", "for i = 1, 2 do\nprint('pass ' .. i) end" }, entries(histfile))
    local p = assert(io.popen("stat -c %a " .. quote(histfile)))
    assert.are.equal("600", p:read("l"))
    p:close()
  end)

  it("is read back by the next session: Up recalls the last one's lines", function()
    term = terminal()
    term.start("MEND_HISTFILE=" .. quote(histfile))
    term.keys("Up", "Up", "Enter")
    local s = term.wait_for("\n42\n")
    assert.truthy(s:find("mend> 6 * 7\n42\n", 1, true))
    term.keys("Up", "Up", "Enter")
    term.wait_for("pass 2")
    term.leave()
    assert.are.same({ "6 * 7", "for i = 1, 2 do\nprint('pass ' .. i) end", "6 * 7",
                      "for i = 1, 2 do\nprint('pass ' .. i) end" }, entries(histfile))
  end)

  it("goes to ~/.mend_history without MEND_HISTFILE, and nowhere with it empty", function()
    local home = H.tmp_dir()
    term = terminal()
    term.start("HOME=" .. quote(home) .. " MEND_HISTFILE=")
    term.type_text("1 + 1")
    term.keys("Enter")
    term.wait_for("\n2\n")
    term.leave()
    assert.is_nil(io.open(home .. "/.mend_history"))
    term.close()
    term = terminal()
    term.start("HOME=" .. quote(home) .. " MEND_HISTFILE= env -u MEND_HISTFILE")
    term.type_text("2 + 2")
    term.keys("Enter")
    term.wait_for("\n4\n")
    term.leave()
    assert.are.same({ "2 + 2" }, entries(home .. "/.mend_history"))
  end)
end)
