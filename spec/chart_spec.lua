-- `mend history RUN --chart`: a run's timeline drawn in the terminal from its history, one
-- lane per step, as the dashboard draws it.
local H = require "spec.helper"

local MEND, q, sh = H.MEND, H.quote, H.shell

local function lane(out, step)
  return out:match("\n" .. step .. "%s+|([^|\n]*)|")
end

local function count(s, ch)
  local n = 0
  for c in s:gmatch(".") do n = n + (c == ch and 1 or 0) end
  return n
end

describe("mend history --chart", function()
  after_each(H.cleanup)

  it("draws each attempt, retry wait and breaker wait of a run on its step's lane", function()
    local db = H.new_db()
    local rc, out = sh(MEND .. " run workflows/flaky_breaker.lua --clock virtual --seed 1 --db " .. q(db) ..
                       " 2>/dev/null")
    assert.are.equal(0, rc, out)
    local id = out:match("run (%w+): succeeded")
    rc, out = sh(MEND .. " history " .. id .. " --chart --db " .. q(db))
    assert.are.equal(0, rc, out)
    local fetch, publish = lane(out, "fetch_rates"), lane(out, "publish")
    assert.are.equal(60, #fetch)
    assert.are.equal(5, count(fetch, "x"))          -- five failed attempts
    assert.are.equal(1, count(fetch, "#"))          -- the sixth succeeded, last
    assert.are.equal("#", fetch:sub(-1))
    assert.matches("~", fetch)                      -- retry waits
    assert.matches("BBB", fetch)                    -- breaker waits
    assert.are.equal("#", publish:sub(-1))
    assert.matches("%+33%.%d+ s", out)              -- the axis: the run took 33.8 s of its clock
    -- a script asking for JSON gets a usage error, not a picture it cannot read
    rc, out = sh(MEND .. " history " .. id .. " --chart --json --db " .. q(db))
    assert.are.equal(2, rc, out)
    assert.matches("^mend: %-%-chart and %-%-json", out)
  end)

  it("marks a compensation that failed", function()
    local dir = H.tmp_dir()
    local db = H.new_db(dir, "c.db")
    local flag = H.write_file(dir, "down", "")
    local wf = H.write_file(dir, "refund.lua", [[
local mend = require "mend"
return { name = "refund", compensate_retry = { max_attempts = 2, initial = 0.5, jitter = 0 },
  steps = {
    { name = "charge", execute = function() return "c" end,
      compensate = function(ctx)
        local f = io.open(ctx.input.flag)
        if f then f:close(); error(mend.retryable("refund service down")) end
      end },
    { name = "ship", execute = function() error(mend.fatal("no courier")) end },
  } }
]])
    local rc, out = sh(MEND .. " run " .. q(wf) .. " --clock virtual --db " .. q(db) .. " --input " ..
                       q('{"flag":"' .. flag .. '"}') .. " 2>/dev/null")
    assert.are.equal(4, rc, out)
    local id = out:match("run (%w+): needs_attention")
    rc, out = sh(MEND .. " history " .. id .. " --chart --db " .. q(db))
    assert.are.equal(0, rc, out)
    local charge = lane(out, "charge")
    assert.are.equal("X", charge:sub(-1))           -- its compensation failed, last
    assert.matches("#", charge)
    assert.are.equal("x", lane(out, "ship"):sub(1, 1))
  end)
end)
