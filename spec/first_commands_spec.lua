-- A new user's first commands: an empty --key refused before a database is made, and the
-- REPL's use(NAME) finding workflows/NAME.lua past a folder NAME, saying why when it finds none.
local H = require "spec.helper"

-- the specs run in the source tree (as cli_spec's workflows/order.lua); $PWD may name another
-- directory (ctest's), so the working directory is asked
local QUEST = (function()
  local p = assert(io.popen("pwd"))
  local cwd = p:read("l")
  p:close()
  return cwd .. "/workflows/quest.lua"
end)()

-- `mend ARGS` run in dir (no --db: the default mend.db there), stdin from the text `input`;
-- exit code, stdout, stderr.
local function mend_here(dir, args, input)
  local errfile, infile = os.tmpname(), os.tmpname()
  local f = assert(io.open(infile, "w"))
  f:write(input or "")
  f:close()
  local p = assert(io.popen(("cd %s && %s %s <%s 2>%s"):format(H.quote(dir), H.MEND, args,
                                                             H.quote(infile), H.quote(errfile))))
  local out = p:read("a")
  local _, _, code = p:close()
  local err = H.slurp(errfile)
  os.remove(errfile)
  os.remove(infile)
  return code, out, err
end

describe("a new user's first commands", function()
  after_each(H.cleanup)

  -- An empty key is known from the command line alone, as invalid --input JSON is: the
  -- refusal must come before the database is opened. It came after: a `mend start ... --key
  -- "$ORDER"` with ORDER unset, typed in the wrong directory, left a new mend.db there.
  it("refuses mend start --key '' before creating a database", function()
    local dir = H.tmp_dir()
    local code, _, err = mend_here(dir, "start " .. H.quote(QUEST) .. " --key ''")
    assert.are.equal(1, code, err)
    assert.truthy(err:find("run key is empty", 1, true), err)
    assert.is_nil(io.open(dir .. "/mend.db", "rb"), "mend start --key '' created mend.db")
    -- as invalid --input JSON leaves nothing behind
    local other = H.tmp_dir()
    code, _, err = mend_here(other, "start " .. H.quote(QUEST) .. " --input '{bad'")
    assert.are.equal(1, code, err)
    assert.is_nil(io.open(other .. "/mend.db", "rb"))
  end)

  -- The REPL's use(NAME) says (its help): "A name without a slash that is not a file is looked
  -- for as workflows/NAME.lua". A folder NAME is not a file: mend start NAME and the REPL's
  -- start(NAME) find workflows/NAME.lua then; use(NAME) read the folder and failed.
  it("REPL use(NAME) finds workflows/NAME.lua when ./NAME is a folder", function()
    local dir = H.tmp_dir()
    assert(os.execute("mkdir -p " .. H.quote(dir .. "/workflows") .. " " ..
                      H.quote(dir .. "/quest")))
    H.write_file(dir .. "/workflows", "quest.lua", H.slurp(QUEST))
    local code, out, err = mend_here(dir, "repl --db r.db", "print(use('quest'))\n")
    assert.are.equal(0, code, err)
    assert.are.equal("quest\n", out:match("quest\n$") or out .. err)
    assert.is_nil(err:find("Is a directory", 1, true), err)
  end)

  -- A missing workflow file is named with the OS reason by eng:load, mend_engine_load and
  -- mend run; use said only "no workflow file".
  it("REPL use of a missing file says why, as eng:load and mend run do", function()
    local dir = H.tmp_dir()
    local code, out, err = mend_here(dir, "repl --db r.db", "use('nope.lua')\n")
    assert.truthy(code == 0 or code == 1, err)
    local said = out .. err
    assert.truthy(said:find("nope.lua", 1, true), said)
    assert.truthy(said:find("No such file or directory", 1, true), said)
  end)
end)
