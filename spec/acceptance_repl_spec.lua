-- Acceptance of `mend repl` as README.md ("Playing with it") and `help()` describe it, typed on
-- stdin: workflows loaded with use, a start with a run key given twice, an event sent with
-- signal, a token completed and one failed with complete and fail, a used token refused on
-- the user's line, status and runs, quit, and a --db file the other commands read after.
local H = require "spec.helper"
local json = require("mend").json

local MEND, q = H.MEND, H.quote

local WAIT = [[
return { name = "acc_wait", steps = {
  { name = "first", execute = function() return { n = 1 } end, compensate = function() end },
  { name = "kill", wait_for = "go" },
  { name = "after", execute = function(ctx) return ctx.results.kill end },
} }]]
-- the workflow shares the REPL's Lua state: it leaves its token where the person can type it
local TOKEN = [[
return { name = "acc_token", steps = {
  { name = "approve", wait = "token", retry = { max_attempts = 1 },
    execute = function(ctx) rawset(_G, "last_token", ctx:token()) end },
} }]]

local function repl(dir, script, args)
  H.write_file(dir, "session.lua", script)
  local p = assert(io.popen(("%s repl %s <%s 2>%s"):format(q(MEND), args or "",
    q(dir .. "/session.lua"), q(dir .. "/stderr"))))
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out, H.read(dir .. "/stderr")
end

describe("mend repl from its documents", function()
  after_each(function() H.cleanup() end)

  it("starts, signals, completes and fails tokens, shows runs, and leaves on quit()", function()
    local dir = H.tmp_dir()
    H.write_file(dir, "acc_wait.lua", WAIT)
    H.write_file(dir, "acc_token.lua", TOKEN)
    local db = dir .. "/repl.db"
    local code, out, err = repl(dir, table.concat({
      ('use %q'):format(dir .. "/acc_wait.lua"),
      ('use %q'):format(dir .. "/acc_token.lua"),
      'id = start("acc_wait", { n = 1 }, { key = "r-1" })',
      'advance(0.1)',
      'status(id)',
      'print("same run:", start("acc_wait", nil, { key = "r-1" }) == id)',
      'signal(id, "go", { gold = 7 })',
      'run()',
      'print("wait run:", eng:status(id).status)',
      'tid = start("acc_token"); advance(0.1)',
      'complete(last_token, { by = "ann" })',
      'run()',
      'print("token run:", eng:status(tid).status, json.encode(eng:status(tid).steps[1].result))',
      'complete(last_token, 1)',
      'tid2 = start("acc_token"); advance(0.1)',
      'fail(last_token, "fatal", "not eligible")',
      'run()',
      'print("failed run:", eng:status(tid2).status)',
      'signal(id, "go")',
      'runs()',
      'quit()',
      'print("not reached")',
    }, "\n") .. "\n", "--db " .. q(db))
    assert.are.equal(1, code)   -- the chunks that failed
    assert.truthy(out:find('"acc_wait"\n"acc_token"\n', 1, true), out)
    assert.truthy(out:find("kill             waiting", 1, true), out)
    assert.truthy(out:find("due: kill waiting for event go", 1, true), out)
    assert.truthy(out:find("same run:\ttrue\n", 1, true), out)
    assert.truthy(out:find("wait run:\tsucceeded\n", 1, true), out)
    assert.truthy(out:find('token run:\tsucceeded\t{"by":"ann"}\n', 1, true), out)
    assert.truthy(out:find("failed run:\tfailed\n", 1, true), out)
    assert.truthy(out:find("RUN%s+WORKFLOW%s+STATUS"), out)
    assert.is_nil(out:find("not reached", 1, true))
    -- errors name the user's line, on stderr, and the session went on
    assert.truthy(err:find("error: stdin:1: complete: token of run [%w]+ step approve attempt 1 " ..
      "was used already: a token is single use"), err)
    assert.truthy(err:find("error: stdin:1: signal: run [%w]+ has ended %(succeeded%)"), err)
    -- the database given with --db is the one the other commands read
    local id = out:match("acc_wait run (%w+): running")
    local p = assert(io.popen(("%s status %s --db %s --json"):format(q(MEND), id, q(db))))
    local status = json.decode(p:read("a"))
    p:close()
    assert.are.equal("succeeded", status.status)
    assert.are.same({ gold = 7 }, status.steps[3].result)
  end)
end)
