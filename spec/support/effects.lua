-- A stand-in for an external service that dedupes by idempotency key, as a payment provider
-- does. It keeps its state in files of its own, outside the worker's memory and database, so
-- that it outlives the worker being killed and the crash tests can audit it afterwards.
--
-- Each effect is one file named for its key, written whole and then renamed into place: the
-- rename is the moment the effect is applied, so a kill leaves it applied or not, never half.
-- Every request (applied or deduped) is appended to requests.log; where its line ends in that
-- file is the request's place in the service's own order (appends from every process land one
-- after another), which an effect keeps as its `seq`: the crash audits order effects by it,
-- not by the clocks of the workers that asked for them, which may disagree.
local M = {}

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

local function safe(key) return (key:gsub("[^%w%-]", "_")) end

local function append(path, line)
  local f = assert(io.open(path, "a"))
  f:write(line, "\n")
  f:flush()
  local at = f:seek("cur")
  f:close()
  return at
end

-- Applies `kind` ("apply" or "undo") for key once; returns true if applied now, false if the
-- key had been applied before (the request is deduped).
function M.call(dir, kind, ctx, key)
  local seq = append(dir .. "/requests.log", table.concat({ kind, ctx.run_id, ctx.step, key, ctx.attempt }, " "))
  local final = dir .. "/" .. kind .. "-" .. safe(key)
  if exists(final) then return false end
  -- a name of its own: a worker that lost its lease may still be finishing the same call
  local tmp = string.format("%s.%d.tmp", final, math.random(1 << 30))
  local f = assert(io.open(tmp, "w"))
  f:write(string.format("%s %s %s %.6f %d\n", ctx.run_id, ctx.step, key, ctx:now(), seq))
  f:close()
  assert(os.rename(tmp, final))
  return true
end

-- Reads the effects back: list of { kind, run, step, key, at, seq }.
function M.read(dir)
  local out = {}
  local p = assert(io.popen("ls " .. dir))
  for name in p:lines() do
    local kind = name:match("^(%a+)%-") 
    if kind and not name:match("%.tmp$") then
      local f = assert(io.open(dir .. "/" .. name))
      local run, step, key, at, seq = f:read("l"):match("^(%S+) (%S+) (%S+) (%S+) (%d+)$")
      f:close()
      out[#out + 1] = { kind = kind, run = run, step = step, key = key, at = tonumber(at),
                        seq = tonumber(seq) }
    end
  end
  p:close()
  return out
end

-- Reads requests.log: list of { kind, run, step, key, attempt }.
function M.requests(dir)
  local out = {}
  local f = io.open(dir .. "/requests.log")
  if not f then return out end
  for line in f:lines() do
    local kind, run, step, key, attempt = line:match("^(%S+) (%S+) (%S+) (%S+) (%S+)$")
    if kind then out[#out + 1] = { kind = kind, run = run, step = step, key = key, attempt = tonumber(attempt) } end
  end
  f:close()
  return out
end

return M
