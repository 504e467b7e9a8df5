-- The `mend` command, run as a real process against temporary SQLite databases.
-- The binary is $MEND_BIN (ctest sets it), else /work/main/build/mend.

local json = require("mend").json

local MEND = os.getenv("MEND_BIN") or "/work/main/build/mend"
local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "."

local H = require "spec.helper"
local quote, slurp = H.quote, H.slurp

-- Runs mend with the given arguments from the repository root; returns the exit code, stdout
-- and stderr.
local function mend(...)
  local words = {}
  for i, a in ipairs({ ... }) do words[i] = quote(a) end
  local errfile = os.tmpname()
  local cmd = ("cd %s && %s %s 2>%s"):format(quote(ROOT), quote(MEND), table.concat(words, " "),
                                            quote(errfile))
  local p = assert(io.popen(cmd, "r"))
  local stdout = p:read("a")
  local _, how, code = p:close()
  local stderr = slurp(errfile)
  os.remove(errfile)
  if how == "signal" then code = 128 + code end
  return code, stdout, stderr
end

-- A fresh database of the backend under test (H.new_db: a PostgreSQL one with MEND_TEST_PG).
local function temp_db()
  if H.PG then return H.new_db() end
  local path = os.tmpname()
  os.remove(path)
  return path .. ".db"
end

local function remove_db(path)
  if H.is_pg(path) then return end   -- dropped by H.cleanup
  for _, suffix in ipairs({ "", "-wal", "-shm", "-journal" }) do os.remove(path .. suffix) end
end

local function lines_matching(text, pattern)
  local found = {}
  for line in text:gmatch("[^\n]+") do
    if line:find(pattern) then found[#found + 1] = line end
  end
  return found
end

-- The line of mend's own error message ("mend: ..."); the engine may log before it.
local function error_line(stderr)
  return lines_matching(stderr, "^mend: ")[1] or ""
end

-- Position of the first line of text that contains all the plain strings given.
local function line_index(text, ...)
  local n, wanted = 0, { ... }
  for line in text:gmatch("[^\n]+") do
    n = n + 1
    local all = true
    for _, w in ipairs(wanted) do
      if not line:find(w, 1, true) then all = false break end
    end
    if all then return n end
  end
  return nil
end

describe("the mend command", function()
  local db

  before_each(function() db = temp_db() end)
  after_each(function()
    remove_db(db)
    H.cleanup()
  end)

  describe("mend run", function()
    it("runs the order saga to success and exits 0", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db)
      assert.are.equal(0, code, err)
      assert.truthy(out:find("succeeded", 1, true), out)
      assert.truthy(out:find("timeline:", 1, true), out)
      assert.truthy(line_index(out, "ship", "running -> succeeded"), out)
    end)

    it("shows the retry of the flaky payment gateway with its delay", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--seed", "7")
      assert.are.equal(0, code, err)
      assert.truthy(line_index(out, "charge", "running -> retry_wait", "delay"), out)
    end)

    it("logs only failures to stderr with --log-level warn", function()
      local code, _, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                "--seed", "7", "--log-level", "warn")
      assert.are.equal(0, code, err)
      assert.truthy(err:find('"level":"warn"', 1, true), err)
      assert.falsy(err:find('"level":"info"', 1, true), err)
    end)

    it("draws the same backoff delays for the same --seed", function()
      local function delays(seed, path)
        local _, out = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", path,
                            "--seed", seed, "--json")
        local _, hout = mend("history", json.decode(out).id, "--db", path, "--json")
        local found = {}
        for _, e in ipairs(json.decode(hout)) do
          if e.event == "step" and e.to == "retry_wait" then found[#found + 1] = e.delay end
        end
        return found
      end
      local other = temp_db()
      local a, b = delays("11", db), delays("11", other)
      remove_db(other)
      assert.are.equal(1, #a)
      assert.are.same(a, b)
    end)

    it("accepts --durability process and --flag=value", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock=virtual", "--db=" .. db,
                                  "--durability", "process")
      assert.are.equal(0, code, err)
      assert.truthy(out:find("succeeded", 1, true), out)
    end)

    -- A message that is not UTF-8 (Latin-1 text, a binary body's start) cannot go into JSON as
    -- it is: its bytes become '?' once, where it is recorded, and the rest of it is kept.
    it("keeps a step's error and log line that are not UTF-8, in the log, status and history", function()
      local dir = H.tmp_dir()
      local wf = dir .. "/latin.lua"
      H.write_file(dir, "latin.lua", [[
return { name = "latin", steps = {
  { name = "a", execute = function() return 1 end, compensate_retry = { max_attempts = 1 },
    compensate = function() error("r\xe9par\xe9", 0) end },
  { name = "b", retry = { max_attempts = 1 },
    execute = function(ctx)
      ctx:log("l\xe9 \xff, not l\xc3\xa9")
      error("caf\xe9 \xff, not caf\xc3\xa9", 0)
    end },
} }
]])
      local code, out, err = mend("run", wf, "--clock", "virtual", "--db", db, "--json")
      assert.are.equal(4, code, err)
      local failed = lines_matching(err, "running %-> failed")
      assert.are.equal(1, #failed, err)
      assert.matches("caf%? %?, not caf\u{e9}", failed[1])
      local id = json.decode(out).id
      local _, status = mend("status", id, "--db", db, "--json")
      assert.are.equal("error: caf? ?, not caf\u{e9}", json.decode(status).steps[2].error)
      local _, hist = mend("history", id, "--db", db, "--json")
      local errors = {}
      for _, e in ipairs(json.decode(hist)) do
        local text = e.error and e.event ~= "alert" and e.step .. ": " .. e.error
        if text and text ~= errors[#errors] then errors[#errors + 1] = text end
      end
      assert.are.same({ "b: error: caf? ?, not caf\u{e9}", "a: error: r?par?" }, errors)
      local logged = {}
      for _, e in ipairs(json.decode(hist)) do
        if e.event == "log" then logged[#logged + 1] = e.detail end
      end
      assert.are.same({ "l? ?, not l\u{e9}" }, logged)
      assert.are.equal(1, #lines_matching(err, "l%? %?, not l\u{e9}"), err)
      -- the dead letter and its alert, as a person is told of it
      local _, dlq = mend("dlq", "--db", db, "--json")
      assert.are.equal("error: r?par?", json.decode(dlq)[1].error)
    end)

    it("reads a row that is not UTF-8, written by hand, with '?' for its bad bytes only #sqlite",
       function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--json")
      assert.are.equal(0, code, err)
      local id = json.decode(out).id
      local sql = ("UPDATE runs SET error = CAST(X'6361C3A9FF' AS TEXT) WHERE id = '%s'"):format(id)
      assert.are.equal(0, H.shell(("sqlite3 %s %s"):format(H.quote(db), H.quote(sql))))
      local _, status = mend("status", id, "--db", db, "--json")
      assert.are.equal("ca\u{e9}?", json.decode(status).error)
    end)

    it("compensates a declined card in reverse and exits 3", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--input", '{"card":"declined"}')
      assert.are.equal(3, code, err)
      assert.truthy(out:find("compensated", 1, true), out)
      local declined = line_index(out, "charge", "card declined")
      local turn = line_index(out, "turning back")
      local compensating = line_index(out, "reserve", "-> compensating")
      local compensated = line_index(out, "reserve", "compensating -> compensated")
      assert.truthy(declined, out)
      assert.truthy(turn, out)
      assert.truthy(compensating, out)
      assert.truthy(compensated, out)
      assert.is_true(declined < turn and turn < compensating and compensating < compensated, out)
      assert.are.same({}, lines_matching(out, "ship%s+%S+ %-> running"))
    end)

    it("prints the status object with --json", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--json")
      assert.are.equal(0, code, err)
      local st = json.decode(out)
      assert.are.equal("succeeded", st.status)
      assert.are.equal("order", st.workflow)
      assert.are.equal(3, #st.steps)
    end)

    it("gives the same run for a run key used twice", function()
      local _, out1 = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                           "--key", "order-17", "--json")
      local code, out2, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                   "--key", "order-17", "--json")
      assert.are.equal(0, code, err)
      assert.are.equal(json.decode(out1).id, json.decode(out2).id)
      assert.are.equal("order-17", json.decode(out2).key)
    end)

    it("mend start with a run key used before prints that run, and says whose it is", function()
      local code, id, err = mend("start", "order", "--db", db, "--key", "k-9")
      assert.are.equal(0, code, err)
      assert.are.equal("", err)
      local code2, id2, err2 = mend("start", "order", "--db", db, "--key", "k-9")
      assert.are.equal(0, code2, err2)
      assert.are.equal(id, id2)
      assert.are.equal("mend: run key k-9 names the existing run " .. id:gsub("%s+$", "")
                       .. ", a run of workflow order\n", err2)
    end)

    -- A worker serves workflows by the names their files declare: mend start finds one by that
    -- name too when no file is named after it, and names the files that failed to load.
    it("mend start finds a workflow declared in a file named otherwise", function()
      local dir = H.tmp_dir()
      H.write_file(dir, "billing.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                       "execute = function() return 1 end } } }")
      local code, id, err = mend("start", "invoice", "--db", db, "--workflows", dir)
      assert.are.equal(0, code, err)
      local _, status = mend("status", id:gsub("%s+$", ""), "--db", db, "--json")
      assert.are.equal("invoice", json.decode(status).workflow)
      H.write_file(dir, "broken.lua", "return { name = 'x', steps = {")
      code, id, err = mend("start", "nope", "--db", db, "--workflows", dir)
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.matches("^mend: no workflow file nope, and no " .. dir:gsub("%p", "%%%0") ..
                     "/nope%.lua, nor a file in .- that declares workflow nope; these failed to " ..
                     "load and may: .-broken%.lua:%d+:", err)
    end)

    -- A file there that cannot be opened read as one not there ("no workflows/x.lua").
    it("mend start names a loop of symbolic links where the workflow's file is", function()
      local dir = H.tmp_dir()
      assert(os.execute("ln -s y.lua " .. quote(dir .. "/x.lua") .. " && ln -s x.lua "
                        .. quote(dir .. "/y.lua")))
      local code, id, err = mend("start", "x", "--db", db, "--workflows", dir)
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.matches("mend: no workflow file x, and " .. dir .. "/x.lua: Too many levels of "
                     .. "symbolic links (a loop of symbolic links, or a chain of them too long)",
                     err, 1, true)
    end)

    -- Loading a file runs its top-level code: a start ran that of every file of DIR.
    it("mend start loads only the files whose text names the workflow, else the others", function()
      local dir = H.tmp_dir()
      local mark = dir .. "/loaded"
      H.write_file(dir, "billing.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                       "execute = function() return 1 end } } }")
      H.write_file(dir, "other.lua", ("io.open(%q, 'a'):write('other\\n') return { name = " ..
                                      "'w' .. 'x', steps = { { name = 'a', execute = " ..
                                      "function() return 1 end } } }"):format(mark))
      local code, _, err = mend("start", "invoice", "--db", db, "--workflows", dir,
                                "--no-sandbox")
      assert.are.equal(0, code, err)
      assert.are.equal("", H.read(mark))
      code, _, err = mend("start", "wx", "--db", db, "--workflows", dir, "--no-sandbox")
      assert.are.equal(0, code, err)
      assert.are.equal("other\n", H.read(mark))
    end)

    -- A worker's workflow loader for dir: the warnings it logs (a list it fills) and the loader.
    local function loader_warnings(dir)
      local lines = {}
      local eng = H.new_engine({ log = function(rec)
        if rec.level == "warn" then lines[#lines + 1] = rec.message end
      end })
      return lines, require("mend.cli.files").workflow_loader(eng, dir)
    end

    -- Two files of DIR that declare one name (a copy kept as a backup) are one workflow too
    -- many: which is meant is not guessed, and a worker serving DIR says which it serves.
    it("mend start refuses a name two files declare, and a worker names them both", function()
      local dir = H.tmp_dir()
      local src = "return { name = 'invoice', steps = { { name = 'a', execute = function() " ..
                  "return %d end } } }"
      H.write_file(dir, "billing.lua", src:format(1))
      H.write_file(dir, "billing_old.lua", src:format(2))
      local code, id, err = mend("start", "invoice", "--db", db, "--workflows", dir)
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.are.equal("mend: workflow invoice is declared by two files of " .. dir .. ": " ..
                       dir .. "/billing.lua and " .. dir .. "/billing_old.lua: keep one, or " ..
                       "give the file to start\n", err)
      local lines, load = loader_warnings(dir)
      load(true)
      assert.are.same({ dir .. "/billing.lua and " .. dir .. "/billing_old.lua both declare " ..
                        "workflow invoice: its new runs use " .. dir .. "/billing_old.lua, the " ..
                        "last loaded (keep one file a workflow)" }, lines)
    end)

    -- DIR/NAME.lua declaring another workflow while a file of DIR declares NAME: it started
    -- the file's workflow, not the one of that name a worker serving DIR runs.
    it("mend start NAME refuses when DIR/NAME.lua declares another and a file declares NAME",
       function()
      local dir = H.tmp_dir()
      local src = "return { name = '%s', steps = { { name = 'a', execute = function() " ..
                  "return 1 end } } }"
      H.write_file(dir, "invoice.lua", src:format("billing"))
      H.write_file(dir, "new.lua", src:format("invoice"))
      local code, id, err = mend("start", "invoice", "--db", db, "--workflows", dir)
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.are.equal("mend: " .. dir .. "/invoice.lua declares workflow billing, and " .. dir ..
                       "/new.lua declares workflow invoice: give the file to start\n", err)
      os.remove(dir .. "/new.lua")
      code, id, err = mend("start", "invoice", "--db", db, "--workflows", dir)
      assert.are.equal(0, code, err)
      local _, status = mend("status", id:gsub("%s+$", ""), "--db", db, "--json")
      assert.are.equal("billing", json.decode(status).workflow)
    end)

    it("takes a workflow file and a symbolic link to it (one text) as one workflow", function()
      local dir = H.tmp_dir()
      H.write_file(dir, "billing.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                       "execute = function() return 1 end } } }")
      assert(os.execute("ln -s billing.lua " .. H.quote(dir .. "/invoice_v1.lua")))
      local code, id, err = mend("start", "invoice", "--db", db, "--workflows", dir)
      assert.are.equal(0, code, err)
      assert.matches("^%w+\n$", id)
      local lines, load = loader_warnings(dir)
      load(true)
      -- the file edited while the worker serves: the link's text is the new one too
      H.write_file(dir, "billing.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                       "execute = function() return 2 end } } }")
      load(false)
      assert.are.same({}, lines)
    end)

    -- A --workflows that cannot be read (missing, a file) is named with why, as the worker's
    -- refusal names it; a WORKFLOW given as a path that is a folder is named as one, not
    -- looked up as DIR/<path>.lua.
    it("mend start says why --workflows cannot be read, and that a WORKFLOW path is a folder",
       function()
      local code, id, err = mend("start", "order", "--db", db, "--workflows", "workflows/order.lua")
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.truthy(error_line(err):find("workflows directory workflows/order.lua: Not a directory",
                                         1, true), err)
      local missing = H.tmp_dir() .. "/none"
      code, _, err = mend("start", "order", "--db", db, "--workflows", missing)
      assert.are.equal(1, code, err)
      assert.truthy(error_line(err):find("workflows directory " .. missing ..
                                         ": No such file or directory", 1, true), err)
      local folder = H.tmp_dir() .. "/order.lua"
      assert(os.execute("mkdir " .. quote(folder)))
      code, id, err = mend("start", folder, "--db", db)
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.are.equal("mend: " .. folder .. " is a folder, not a workflow file", error_line(err))
    end)

    it("mend start NAME finds the workflow when a folder of that name is where it runs", function()
      local dir = H.tmp_dir()
      os.execute("mkdir -p " .. quote(dir .. "/invoice") .. " " .. quote(dir .. "/wf"))
      H.write_file(dir .. "/wf", "invoice.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                                "execute = function() return 1 end } } }")
      local code, out = H.shell(("cd %s && %s start invoice --db %s --workflows wf")
                                :format(quote(dir), quote(MEND), quote(db)))
      assert.are.equal(0, code, out)
      local _, status = mend("status", out:match("%S+"), "--db", db, "--json")
      assert.are.equal("invoice", json.decode(status).workflow)
    end)

    -- beside the folder case: a service's executable (or script) named like its workflow is
    -- not read as the workflow file (a Lua syntax error in a shell script) when --workflows
    -- has NAME.lua.
    it("mend start NAME finds the workflow when a script of that name is where it runs", function()
      local dir = H.tmp_dir()
      os.execute("mkdir -p " .. quote(dir .. "/wf"))
      H.write_file(dir, "invoice", "#!/bin/sh\necho invoicing\n")
      H.write_file(dir .. "/wf", "invoice.lua", "return { name = 'invoice', steps = { { name = 'a', " ..
                                                "execute = function() return 1 end } } }")
      local code, out = H.shell(("cd %s && %s start invoice --db %s --workflows wf 2>&1")
                                :format(quote(dir), quote(MEND), quote(db)))
      assert.are.equal(0, code, out)
    end)

    it("refuses a run key of another workflow's run, with mend start and mend run (exit 1)", function()
      local code, id, err = mend("start", "order", "--db", db, "--key", "k-10")
      assert.are.equal(0, code, err)
      id = id:gsub("%s+$", "")
      local code2, out2, err2 = mend("start", "quest", "--db", db, "--key", "k-10")
      assert.are.equal(1, code2, err2)
      assert.are.equal("", out2)
      -- mend's words, with no line of mend's own Lua in front (eng:start names its caller's)
      assert.truthy(err2:find("^mend: start: run key k%-10 names run " .. id ..
                              ", a run of workflow order, not quest"), err2)
      local code3, out3, err3 = mend("run", "workflows/flaky_breaker.lua", "--clock", "virtual",
                                     "--db", db, "--key", "k-10", "--json")
      assert.are.equal(1, code3, err3)
      assert.are.equal("", out3)
      assert.truthy(err3:find("^mend: start: run key k%-10 names run %w+, a run of workflow "
                              .. "order, not "), err3)
      -- nothing recorded for either refusal
      assert.are.same({ "1" }, H.sql(db, "SELECT count(*) FROM runs WHERE run_key = 'k-10'"))
    end)

    it("fails with exit 1 on invalid --input JSON, saying so", function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--input", "{card: declined")
      assert.are.equal(1, code)
      assert.are.equal("", out)
      assert.truthy(err:find("^mend: invalid %-%-input JSON"), err)
      -- an integer past 64 bits: jansson's "too big integer" named neither it nor the way out
      code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                            "--input", '{"id": 123456789012345678901234}')
      assert.are.equal(1, code)
      assert.matches('the integer 123456789012345678901234 is past 64 bits %(%-9223372036854775808 '
                     .. 'to 9223372036854775807%): send it as a string, "123456789012345678901234"',
                     err)
    end)

    -- One argument of a command line holds at most 128 KiB: a larger input comes from a file.
    it("reads --input @FILE from the file, and @- from stdin", function()
      local path = os.tmpname()
      local f = assert(io.open(path, "wb"))
      f:write('{"card":"visa","note":"', string.rep("n", 300 * 1024), '"}')
      f:close()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--input", "@" .. path, "--json")
      assert.are.equal(0, code, err)
      local run = json.decode(out)
      assert.are.equal("visa", run.input.card)
      assert.are.equal(300 * 1024, #run.input.note)
      local p = assert(io.popen(("cd %s && %s run workflows/order.lua --clock virtual --db %s "
                                 .. "--input @- --json < %s 2>/dev/null"):format(quote(ROOT), quote(MEND),
                                 quote(db), quote(path)), "r"))
      local out2 = p:read("a")
      assert.truthy(p:close())
      os.remove(path)
      assert.are.equal(300 * 1024, #json.decode(out2).input.note)
      local code3, _, err3 = mend("run", "workflows/order.lua", "--db", db, "--input", "@" .. path)
      assert.are.equal(1, code3)
      assert.truthy(err3:find("^mend: cannot read %-%-input " .. path:gsub("%p", "%%%0")
                              .. ": No such file"), err3)
      -- a folder opens as a file would: its read fails, and says why
      local dir = H.tmp_dir()
      local code4, _, err4 = mend("run", "workflows/order.lua", "--db", db, "--input", "@" .. dir)
      assert.are.equal(1, code4)
      assert.are.equal("mend: cannot read --input " .. dir .. ": Is a directory", error_line(err4))
    end)

    -- The last of two values was taken, the first dropped without a word: which key or input
    -- was meant is not known (the HTTP API refuses a query parameter given twice likewise).
    it("refuses a flag that takes a value given twice (exit 2), naming it, recording nothing",
       function()
      local code, out, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                  "--key", "k-a", "--key=k-b")
      assert.are.equal(2, code, err)
      assert.are.equal("", out)
      assert.are.equal("mend: --key is given twice: give it once", error_line(err))
      code, _, err = mend("start", "order", "--db", db, "--input", "{}", "--input", "{}")
      assert.are.equal(2, code, err)
      assert.are.equal("mend: --input is given twice: give it once", error_line(err))
      -- no run: no database made either, or one without runs
      local code_runs, runs = mend("runs", "--db", db, "--json")
      assert.truthy(code_runs == 1 or #json.decode(runs) == 0, runs)
      -- a switch given twice says the same thing twice
      assert.are.equal(0, (mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                                "--json", "--json")))
    end)

    -- `--key "$ORDER"` with ORDER unset gave every start the run key "": the second start of
    -- any order answered the first one's run, and an event key "" made every later event a
    -- duplicate. The HTTP API refuses an empty key; so do these.
    it("refuses an empty run key or event key (exit 1), starting and sending nothing", function()
      local code, id, err = mend("start", "order", "--db", db, "--key", "")
      assert.are.equal(1, code, err)
      assert.are.equal("", id)
      assert.truthy(error_line(err):find("run key is empty", 1, true), err)
      code, _, err = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                          "--key", "")
      assert.are.equal(1, code, err)
      assert.truthy(error_line(err):find("run key is empty", 1, true), err)
      code, id, err = mend("start", "quest", "--db", db, "--key", "q-1")
      assert.are.equal(0, code, err)
      id = id:gsub("%s+$", "")
      code, _, err = mend("signal", id, "boss_killed", "--db", db, "--key", "")
      assert.are.equal(1, code, err)
      assert.truthy(error_line(err):find("event key is empty", 1, true), err)
      code, _, err = mend("signal", "--run-key", "", "boss_killed", "--db", db)
      assert.are.equal(1, code, err)
      -- the key given is empty: the run was named, by a key that names none
      assert.truthy(error_line(err):find("run key is empty", 1, true), err)
      local _, runs = mend("runs", "--db", db, "--json")
      assert.are.equal(1, #json.decode(runs))
      assert.are.same({}, H.sql(db, "SELECT seq FROM inbox"))
    end)

    it("fails with exit 1 naming a missing workflow file", function()
      local code, _, err = mend("run", "workflows/no_such_flow.lua", "--db", db)
      assert.are.equal(1, code)
      assert.truthy(err:find("^mend: "), err)
      assert.truthy(err:find("workflows/no_such_flow.lua", 1, true), err)
    end)

    it("fails with exit 1 naming a broken workflow file", function()
      local broken = os.tmpname() .. ".lua"
      local f = assert(io.open(broken, "w"))
      f:write('return { name = "broken", steps = { { name = "a" } } }\n')
      f:close()
      local code, _, err = mend("run", broken, "--db", db)
      os.remove(broken)
      assert.are.equal(1, code)
      assert.truthy(error_line(err):find(broken, 1, true), err)
      assert.truthy(error_line(err):find('"a"', 1, true), err)
    end)

    it("refuses a worker whose --workflows is not a directory, naming it", function()
      local code, _, err = mend("worker", "--workflows", "workflows/order.lua", "--db", db)
      assert.are.equal(1, code)
      assert.truthy(error_line(err):find("workflows directory workflows/order.lua: Not a directory",
                                         1, true), err)
    end)

    it("names the broken file and line first, not where mend's own code asked for the load", function()
      local broken = os.tmpname() .. ".lua"
      local f = assert(io.open(broken, "w"))
      f:write('return { name = "broken",\n  steps = { { name = "a" }\n')
      f:close()
      for _, cmd in ipairs { "run", "start" } do
        local code, _, err = mend(cmd, broken, "--db", db)
        assert.are.equal(1, code, cmd)
        assert.are.equal("mend: " .. broken .. ":3:", error_line(err):sub(1, #broken + 9), err)
      end
      os.remove(broken)
    end)

    -- 1e999 reads as infinity; a worker given it had run (a lease of it failed only at its first
    -- renewal on PostgreSQL), --max-in-flight 2.5 had meant no limit, and 4294967297 one run
    it("refuses a worker's times that are infinite and a count that is not whole", function()
      local empty = os.tmpname()
      os.remove(empty)
      assert(os.execute("mkdir " .. quote(empty)))
      for _, case in ipairs {
        { "--lease", "1e999", "--lease must be a finite number > 0, got 1e999" },
        { "--grace", "1e999", "--grace must be a finite number > 0, got 1e999" },
        { "--poll", "1e999", "--poll must be a finite number > 0, got 1e999" },
        { "--lease", "0x10", "--lease must be a finite number > 0, got 0x10" },   -- (was 16 s)
        { "--park-after", "1e999", "--park-after must be a finite number >= 0, got 1e999" },
        { "--max-in-flight", "2.5", "--max-in-flight must be a whole number from 1 to " ..
          "2147483647, got 2.5" },
        { "--max-in-flight", "0", "--max-in-flight must be a whole number from 1 to 2147483647, " ..
          "got 0" },
        { "--max-in-flight", "1e999", "--max-in-flight must be a whole number from 1 to " ..
          "2147483647, got 1e999" },
        -- past an int: 2^32 + 1 had been a cap of 1, a worker serving one run at a time
        { "--max-in-flight", "4294967297", "--max-in-flight must be a whole number from 1 to " ..
          "2147483647, got 4294967297" },
      } do
        local code, _, err = mend("worker", "--db", db, "--workflows", empty, case[1], case[2])
        assert.are.equal(2, code, case[1])
        assert.are.equal("mend: " .. case[3], error_line(err), case[1])
      end
      os.remove(empty)
    end)

    it("refuses bad flag values with exit 2", function()
      assert.are.equal(2, (mend("run", "workflows/order.lua", "--clock", "sundial")))
      assert.are.equal(2, (mend("run", "workflows/order.lua", "--seed", "abc")))
      assert.are.equal(2, (mend("run", "workflows/order.lua", "--durability", "forever")))
    end)
  end)

  describe("usage errors", function()
    it("exits 2 on an unknown command, with the usage on stderr", function()
      local code, out, err = mend("frobnicate")
      assert.are.equal(2, code)
      assert.are.equal("", out)
      assert.truthy(err:find("unknown command frobnicate", 1, true), err)
      assert.truthy(err:find("usage: mend", 1, true), err)
    end)

    it("exits 2 without a command", function()
      local code, _, err = mend()
      assert.are.equal(2, code)
      assert.truthy(err:find("usage: mend", 1, true), err)
    end)

    it("exits 2 on an unknown flag", function()
      local code, _, err = mend("run", "workflows/order.lua", "--frob")
      assert.are.equal(2, code)
      assert.truthy(err:find("unknown flag --frob", 1, true), err)
      assert.truthy(err:find("usage: mend run", 1, true), err)
    end)

    it("exits 2 on a missing argument", function()
      assert.are.equal(2, (mend("run")))
      assert.are.equal(2, (mend("status")))
      assert.are.equal(2, (mend("history", "--db", db)))
      assert.are.equal(2, (mend("run", "workflows/order.lua", "--input")))
    end)

    it("exits 2 on an extra argument", function()
      assert.are.equal(2, (mend("dlq", "extra", "--db", db)))
    end)
  end)

  describe("--help", function()
    for _, args in ipairs({ { "--help" }, { "-h" }, { "help" }, { "run", "--help" },
                            { "status", "--help" }, { "history", "-h" }, { "dlq", "--help" },
                            { "help", "run" } }) do
      it("exits 0 and prints the usage for mend " .. table.concat(args, " "), function()
        local code, out, err = mend(table.unpack(args))
        assert.are.equal(0, code, err)
        assert.truthy(out:find("usage: mend", 1, true), out)
      end)
    end
  end)

  describe("mend status, history and dlq", function()
    local function run_order(input)
      local _, out = mend("run", "workflows/order.lua", "--clock", "virtual", "--db", db,
                          "--input", input or "{}", "--json")
      return json.decode(out).id
    end

    it("shows a run's status as JSON with its steps", function()
      local id = run_order()
      local code, out, err = mend("status", id, "--db", db, "--json")
      assert.are.equal(0, code, err)
      local st = json.decode(out)
      assert.are.equal(id, st.id)
      assert.are.equal("succeeded", st.status)
      local names = {}
      for i, s in ipairs(st.steps) do
        names[i] = s.name
        assert.are.equal("succeeded", s.status)
      end
      assert.are.same({ "reserve", "charge", "ship" }, names)
      assert.are.equal(2, st.steps[2].attempts)
    end)

    it("names the kind of each step's error beside it, as mend.fatal and the others name it",
       function()
      local id = run_order('{"card":"declined"}')
      local code, out, err = mend("status", id, "--db", db, "--json")
      assert.are.equal(0, code, err)
      local steps = {}
      for _, s in ipairs(json.decode(out).steps) do steps[s.name] = s end
      assert.are.equal("fatal: card declined for order o-1", steps.charge.error)
      assert.are.equal("fatal", steps.charge.error_kind)
      assert.is_nil(steps.reserve.error)
      assert.is_nil(steps.reserve.error_kind)   -- no error, no kind
      -- and each transition of mend history --json that brought an error
      code, out, err = mend("history", id, "--db", db, "--json")
      assert.are.equal(0, code, err)
      local failed
      for _, e in ipairs(json.decode(out)) do
        if e.step == "charge" and e.to == "failed" then failed = e end
        if e.event == "step" and not e.error then assert.is_nil(e.error_kind) end
      end
      assert.are.same({ "fatal: card declined for order o-1", "fatal" },
                      { failed.error, failed.error_kind })
    end)

    it("shows a run's status readably", function()
      local id = run_order('{"card":"declined"}')
      local code, out, err = mend("status", id, "--db", db)
      assert.are.equal(0, code, err)
      assert.truthy(out:find(id, 1, true), out)
      assert.truthy(line_index(out, "reserve", "compensated"), out)
    end)

    it("prints a run's history as a JSON array", function()
      local id = run_order('{"card":"declined"}')
      local code, out, err = mend("history", id, "--db", db, "--json")
      assert.are.equal(0, code, err)
      assert.truthy(out:find("^%s*%["), out)
      local h = json.decode(out)
      assert.is_true(#h > 0)
      local events = {}
      for _, e in ipairs(h) do
        assert.is_number(e.at)
        events[e.event] = true
      end
      assert.is_true(events.step)
      assert.is_true(events.run)
    end)

    it("prints a readable timeline for mend history", function()
      local id = run_order('{"card":"declined"}')
      local code, out, err = mend("history", id, "--db", db)
      assert.are.equal(0, code, err)
      assert.truthy(out:find("turning back", 1, true), out)
    end)

    it("prints a page or the tail of a history, its times still from the run's start", function()
      local id = run_order('{"card":"declined"}')
      local _, out = mend("history", id, "--db", db, "--json")
      local whole = json.decode(out)
      assert.is_true(#whole > 8, out)
      local code, err
      code, out, err = mend("history", id, "--db", db, "--json", "--tail", "4")
      assert.are.equal(0, code, err)
      assert.are.same(table.move(whole, #whole - 3, #whole, 1, {}), json.decode(out))
      code, out, err = mend("history", id, "--db", db, "--json", "--after", "2", "--limit", "3")
      assert.are.equal(0, code, err)
      assert.are.same({ whole[3], whole[4], whole[5] }, json.decode(out))
      code, out = mend("history", id, "--db", db, "--json", "--after", tostring(whole[#whole].seq))
      assert.are.same({}, json.decode(out))
      -- The text of the tail is the whole's last lines: times from the first row.
      local _, full = mend("history", id, "--db", db)
      local _, tail = mend("history", id, "--db", db, "--tail", "3")
      local function last_lines(s, n)
        local lines = {}
        for l in s:gmatch("[^\n]+") do lines[#lines + 1] = l end
        return table.concat(lines, "\n", #lines - n + 1)
      end
      assert.are.equal(last_lines(full, 3), last_lines(tail, 3))
      assert.truthy(last_lines(tail, 3):find("+", 1, true), tail)
      for _, args in ipairs { { "--after", "-1" }, { "--after", "x" }, { "--limit", "0" },
                              { "--tail", "2", "--limit", "3" }, { "--after", "1", "--chart" },
                              { "--chart", "--step", "charge" } } do
        code, out, err = mend("history", id, "--db", db, table.unpack(args))
        assert.are.equal(2, code, table.concat(args, " ") .. ": " .. out)
        assert.matches("%-%-" .. args[1]:sub(3), err)
      end
    end)

    it("prints the dead-letter queue as a JSON array", function()
      run_order()
      local code, out, err = mend("dlq", "--db", db, "--json")
      assert.are.equal(0, code, err)
      assert.truthy(out:find("^%s*%["), out)
      assert.are.same({}, json.decode(out))
    end)

    it("exits 4 for a run in the dead-letter queue, which mend dlq lists", function()
      local file = os.tmpname() .. ".lua"
      local f = assert(io.open(file, "w"))
      f:write([[
        local mend = require "mend"
        return { name = "half_shipped", steps = {
          { name = "ship", execute = function()
              error(mend.compensable("half shipped", { severity = 3 }))
            end } } }
      ]])
      f:close()
      local code, out, err = mend("run", file, "--clock", "virtual", "--db", db, "--json")
      os.remove(file)
      assert.are.equal(4, code, err)
      local id = json.decode(out).id
      assert.are.equal("needs_attention", json.decode(out).status)
      local dcode, dout = mend("dlq", "--db", db, "--json")
      assert.are.equal(0, dcode)
      local entries = json.decode(dout)
      assert.are.equal(1, #entries)
      assert.are.equal(id, entries[1].run_id)
      local _, text = mend("dlq", "--db", db)
      assert.truthy(line_index(text, id, "ship"), text)
    end)

    it("fails with exit 1 for an unknown run", function()
      run_order()
      for _, cmd in ipairs({ "status", "history" }) do
        local code, out, err = mend(cmd, "no-such-run", "--db", db)
        assert.are.equal(1, code)
        assert.are.equal("", out)
        assert.are.equal("mend: no run no-such-run", error_line(err))
      end
    end)

    -- #sqlite: a PostgreSQL database is the server's to create; the test's exists already.
    it("does not create a database that does not exist #sqlite", function()
      local code, _, err = mend("dlq", "--db", db)
      assert.are.equal(1, code)
      assert.truthy(err:find(db, 1, true), err)
      assert.is_nil(io.open(db))
    end)
  end)

  describe("the example workflows", function()
    it("the flaky dependency shows its breaker opening and half-opening", function()
      local code, out, err = mend("run", "workflows/flaky_breaker.lua", "--clock", "virtual",
                                  "--db", db, "--seed", "1")
      assert.are.equal(0, code, err)
      assert.truthy(line_index(out, "breaker rates-api", "-> open"), out)
      assert.truthy(line_index(out, "breaker rates-api", "-> half_open"), out)
      assert.truthy(line_index(out, "fetch_rates", "-> breaker_open"), out)
    end)

    it("the flaky dependency succeeds on its 6th attempt, the breaker's waits not counted",
       function()
      local code, out, err = mend("run", "workflows/flaky_breaker.lua", "--clock", "virtual",
                                  "--db", db, "--json")
      assert.are.equal(0, code, err)
      local st = json.decode(out)
      assert.are.equal("succeeded", st.status)
      assert.are.equal(6, st.steps[1].attempts)
    end)

    it("the idempotent payment charges once although its first response is lost", function()
      local code, out, err = mend("run", "workflows/payment_idempotent.lua", "--clock",
                                  "virtual", "--db", db, "--json")
      assert.are.equal(0, code, err)
      local st = json.decode(out)
      assert.are.equal(2, st.steps[1].attempts)
      assert.are.same({ charge_id = "ch-1", applied = 1, gateway_calls = 2 }, st.steps[2].result)
    end)
  end)
end)

describe("a child process that exits without reading its stdin", function()
  after_each(H.cleanup)

  -- The write to its pipe raised SIGPIPE, which killed `mend run` (or a worker) without a word
  -- (exit 141): every time for a step's mend.exec given more stdin than a pipe holds, now and
  -- then for an alert command that does not read the alert.
  it("is a step's result, or an alert command's exit, and mend goes on", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "deaf.lua", [[
      local mend = require "mend"
      return { name = "deaf", steps = {
        { name = "exec", execute = function()
            return { status = mend.exec{ "true", stdin = string.rep("x", 1000000) }.status }
          end },
        { name = "fail", execute = function(ctx, input)
            if input.fail then error(mend.compensable("stuck", { severity = 3 })) end
          end } } }
    ]])
    local rc, out = H.shell(("%s run %s --db %s --clock virtual --json --log-level error"):format(
      H.MEND, H.quote(file), H.quote(db)))
    assert.are.equal(0, rc, out)
    assert.are.same({ status = 0 }, json.decode(out:match("(%b{})%s*$")).steps[1].result)
    for _ = 1, 5 do
      rc, out = H.shell(("%s run %s --db %s --clock virtual --input '{\"fail\":true}'"
        .. " --alert-command 'exit 0' --log-level error"):format(H.MEND, H.quote(file), H.quote(db)))
      assert.are.equal(4, rc, out)
    end
  end)
end)

describe("mend run with an alert command that hangs", function()
  after_each(H.cleanup)

  -- It waits at most 5 s for the commands of its last alerts: a turn of its loop waited for
  -- the next timer of any kind, so one such command held it for 10 s or for as long as it ran.
  it("hands the alert over and exits after at most 5 s of waiting for the command", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "dead.lua", [[
      local mend = require "mend"
      return { name = "dead", steps = { { name = "a", execute = function()
        error(mend.compensable("stuck", { severity = 3 })) end } } }]])
    local got = dir .. "/alert.json"
    local cmd = ("cat > %s; exec sleep 20 > /dev/null 2>&1"):format(got)
    local rc, out = H.shell(("s=$(date +%%s%%N); %s run %s --db %s --clock virtual --log-level error"
      .. " --alert-command %s; echo \"rc=$? ms=$(( ($(date +%%s%%N) - s) / 1000000 ))\""):format(
      H.MEND, H.quote(file), H.quote(db), H.quote(cmd)))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("rc=4", 1, true), out)
    local ms = tonumber(out:match("ms=(%d+)"))
    assert.is_true(ms >= 4500 and ms < 9000, out)
    assert.truthy(H.slurp(got):find('"run_id"', 1, true))
  end)
end)

describe("the mend command started with stdin, stdout or stderr closed", function()
  after_each(H.cleanup)

  -- A descriptor mend (libuv, SQLite) opened took the closed one's number, and libuv's close of
  -- it aborted the process: "uv__close: Assertion `fd > STDERR_FILENO' failed" (exit 134).
  it("works as with them open", function()
    local dir, db = H.tmp_dir(), H.new_db()
    local file = H.write_file(dir, "one.lua", [[
      return { name = "one", steps = { { name = "a", execute = function() return 1 end } } }]])
    for _, closed in ipairs { "<&-", ">&-", "2>&-" } do
      local rc, out = H.shell(("%s run %s --db %s --clock virtual --log-level error %s; echo \"run=$?\""
        .. "; %s runs --db %s %s; echo \"runs=$?\""):format(H.MEND, H.quote(file), H.quote(db),
        closed, H.MEND, H.quote(db), closed))
      assert.are.equal(0, rc, out)
      assert.truthy(out:find("run=0", 1, true), closed .. ": " .. out)
      assert.truthy(out:find("runs=0", 1, true), closed .. ": " .. out)
    end
  end)
end)
