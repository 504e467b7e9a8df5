-- The servers of the HTTP acceptance specs (spec/acceptance_http_*_spec.lua): a workspace of
-- small workflows, a real `mend serve` or `mend worker --listen` on a free loopback port, and
-- spec/support/http_client.py, a client in Python's standard library written from
-- docs/http-api.md alone, run against it. This file never speaks HTTP itself: what the
-- client checks, and what it prints, is the test.
local H = require "spec.helper"
local S = require "spec.support.serve_harness"

local A = {}
local q = H.quote

local WORKFLOWS = {
  acc_wait = [[
return { name = "acc_wait", steps = {
  { name = "first", execute = function() return { n = 1 } end, compensate = function() end },
  { name = "kill", wait_for = "go" },
  { name = "after", execute = function(ctx) return ctx.results.kill end },
} }]],
  -- a long history: a map of input.n items, then a step behind breaker acc_pay
  acc_many = [[
return { name = "acc_many", steps = {
  { name = "items", map = function(ctx)
      local t = {} for i = 1, ctx.input.n do t[i] = i end return t end,
    step = { execute = function(ctx, item) return item end } },
  { name = "pay", breaker = "acc_pay", execute = function() return "paid" end },
} }]],
  -- a dead letter: the charge is declined and the undo of the reservation fails until the
  -- file input.flag exists
  acc_dead = [[
local mend = require "mend"
return { name = "acc_dead", compensate_retry = { max_attempts = 1 }, steps = {
  { name = "reserve", execute = function() return "r-1" end,
    compensate = function(ctx)
      local f = io.open(ctx.input.flag, "r")
      if not f then error("the stock service is down") end
      f:close()
    end },
  { name = "charge", execute = function() error(mend.fatal("card declined")) end },
} }]],
  -- attempts run out: compensated, then a dead letter with nothing left to resume
  acc_exhaust = [[
local mend = require "mend"
return { name = "acc_exhaust", steps = {
  { name = "reserve", execute = function() return "r-1" end, compensate = function() end },
  { name = "charge", retry = { max_attempts = 2, initial = 0.05, jitter = 0 },
    execute = function() error(mend.retryable("gateway down")) end },
} }]],
}

-- A folder holding the workflows (and acc_broken.lua, failing to load, with broken = true)
-- and the path of a database in it.
function A.workspace(broken)
  local dir = H.tmp_dir()
  for name, text in pairs(WORKFLOWS) do H.write_file(dir, name .. ".lua", text) end
  if broken then H.write_file(dir, "acc_broken.lua", 'error("broken on purpose")\n') end
  return dir, H.new_db(dir)
end

-- A server on the workspace: `worker` (executing runs) or `serve`, with extra flags.
function A.server(command, flags, broken)
  local dir, db = A.workspace(broken)
  local listen = "--listen 127.0.0.1:0 " .. (flags or "")
  if command == "worker" then listen = "--poll 0.05 " .. listen end
  local base = S.start(dir, db, listen, command)
  return base, dir, db
end

-- Runs the client's checks of `group` against base; extra is a table of NAME=VALUE
-- arguments. Asserts that every check passed, naming those that did not.
function A.client(base, group, extra)
  local args = {}
  for k, v in pairs(extra or {}) do args[#args + 1] = q(k .. "=" .. v) end
  local p = assert(io.popen("python3 -B spec/support/http_client.py " .. q(base) .. " " .. q(group)
                            .. " " .. table.concat(args, " ") .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  local fails = {}
  for line in out:gmatch("[^\n]+") do
    if not line:match("^ok ") and not line:match("^defect ") then fails[#fails + 1] = line end
  end
  assert(ok and #fails == 0, "the client's checks of " .. group .. ":\n" .. out)
  assert(out:find("^ok ") or out:find("\nok ") or out:find("^defect "), "no check ran: " .. out)
  return out
end

-- Whether MEND_ACCEPT_DEFECTS names the defect `name` (or is "all"): a spec keeps the check
-- of a defect pending, with the reason, so that the suite stays green while it is there, and
-- runs it (showing it fail) when asked: (A.wanted(name) and it or pending)(title, fn).
function A.wanted(name)
  local want = os.getenv("MEND_ACCEPT_DEFECTS") or ""
  return want == "all" or ("," .. want .. ","):find("," .. name .. ",", 1, true) ~= nil
end

A.stop_all = S.stop_all
return A
