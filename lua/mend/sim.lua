--[[
mend.sim: simulated services for examples and tests. Not part of the engine.

A simulated service stands for a remote dependency (a payment gateway, an inventory API) whose
failures are injected deterministically, so that an example or a spec shows retries, breakers
and idempotency the same way every time.

  local sim = require "mend.sim"
  local payments = sim.service{
    name = "payments",     -- used in error messages (default "service")
    fail_first = 2,        -- the first 2 calls fail without any effect (default 0)
    fail_rate = 0.1,       -- later calls fail with this probability (default 0) ...
    seed = 7,              -- ... drawn from the service's own generator, seeded here (default 1)
    error = "retryable",   -- kind of the injected failures: "retryable" (default) | "fatal"
    retry_after = 2,       -- advice carried by injected retryable errors (default none)
    lose_first = 1,        -- the next call (after the fail_first ones) does its work, then
                           -- fails with a retryable "response lost" error, as a timeout after
                           -- the server did the work (default 0)
    latency = 0.05,        -- seconds each call takes, waited with mend.sleep inside a step
                           -- (outside a coroutine that can yield, no wait) (default 0)
    sleep = nil,           -- optional function(seconds) used instead of that wait
  }

  local charge = payments:call(key, fn_or_value)

One call, in order:
  1. counts the call (`svc.calls`) and waits `latency`;
  2. may fail (fail_first, then fail_rate): raises mend.retryable / mend.fatal, no effect;
  3. with a key seen before (one whose effect was applied): returns the recorded result, and
     nothing is applied a second time: the dedupe of an idempotent service;
  4. otherwise applies the effect: the result is `fn(key, call_number)` when a function is
     given, else the value itself. An error raised by fn, or a mend error it returns,
     propagates and nothing is recorded. The effect is recorded: `svc.applied[key]` counts how
     often each key's effect was applied (1 at most when keys are used), `svc.effects` lists
     every effect in order as `{ key = key, result = result, call = n }`. A nil key means "no
     idempotency key": every call that gets this far applies an effect;
  5. may lose the response (lose_first): calls fail_first+1 .. fail_first+lose_first raise
     mend.retryable("...: response lost") after the effect was applied (or found recorded):
     the caller cannot tell whether it happened, and only a retry with the same key is safe.

  svc:reset()   forgets calls, effects and recorded results and restarts the generator, so the
                same sequence of calls fails the same way again.

  sim.rng(seed) the generator itself: a function returning floats in [0, 1), deterministic for
                a seed (xorshift64*, seeded through splitmix64; never math.random).

Service state lives in the Lua state that loaded the workflow file: it survives across
attempts of a run in one process, not across processes.
--]]

local mend = require "mend"

local M = {}

-- splitmix64: spreads any integer seed over 64 bits, so that seeds 1, 2, 3 start far apart.
local function splitmix64(x)
  x = x + 0x9E3779B97F4A7C15
  x = (x ~ (x >> 30)) * 0xBF58476D1CE4E5B9
  x = (x ~ (x >> 27)) * 0x94D049BB133111EB
  return x ~ (x >> 31)
end

--- A deterministic generator of floats in [0, 1) (xorshift64*, integer arithmetic only).
function M.rng(seed)
  seed = seed or 1
  local s = math.tointeger(seed)
  if not s then
    error(("sim.rng: seed must be an integer, got %s"):format(tostring(seed)), 2)
  end
  local state = splitmix64(s)
  if state == 0 then state = 0x2545F4914F6CDD1D end   -- xorshift must not start at 0
  return function()
    state = state ~ (state >> 12)
    state = state ~ (state << 25)
    state = state ~ (state >> 27)
    local r = state * 0x2545F4914F6CDD1D
    return (r >> 11) * 2.0^-53                       -- top 53 bits: an exact double in [0, 1)
  end
end

local Service = {}
Service.__index = Service

local function check(cond, fmt, ...)
  if not cond then error("sim.service: " .. fmt:format(...), 3) end
end

local function count_option(opts, field)
  local v = opts[field] or 0
  check(math.type(v) == "integer" and v >= 0, "%s must be an integer >= 0, got %s",
        field, tostring(v))
  return v
end

--- Creates a simulated service (see the comment at the top of this file).
function M.service(opts)
  opts = opts or {}
  check(type(opts) == "table", "options must be a table, got %s", type(opts))
  local kind = opts.error or "retryable"
  check(kind == "retryable" or kind == "fatal",
        'error must be "retryable" or "fatal", got %s', tostring(kind))
  local rate = opts.fail_rate or 0
  check(type(rate) == "number" and rate >= 0 and rate <= 1,
        "fail_rate must be a number in [0, 1], got %s", tostring(rate))
  local latency = opts.latency or 0
  check(type(latency) == "number" and latency >= 0,
        "latency must be a number >= 0, got %s", tostring(latency))
  check(opts.retry_after == nil or (type(opts.retry_after) == "number" and opts.retry_after >= 0),
        "retry_after must be a number >= 0, got %s", tostring(opts.retry_after))
  check(opts.sleep == nil or type(opts.sleep) == "function",
        "sleep must be a function, got %s", type(opts.sleep))
  local svc = setmetatable({
    name = opts.name or "service",
    fail_first = count_option(opts, "fail_first"),
    lose_first = count_option(opts, "lose_first"),
    fail_rate = rate,
    seed = opts.seed or 1,
    error_kind = kind,
    retry_after = opts.retry_after,
    latency = latency,
    sleep = opts.sleep,
  }, Service)
  svc:reset()
  return svc
end

--- Forgets every call, effect and recorded result; restarts the generator from the seed.
function Service:reset()
  self.calls = 0
  self.applied = {}
  self.effects = {}
  self.recorded = {}
  self.random = M.rng(self.seed)
end

function Service:wait()
  if self.latency <= 0 then return end
  if self.sleep then
    self.sleep(self.latency)
  elseif coroutine.isyieldable() then
    mend.sleep(self.latency)
  end
end

-- The injected failure for call n, or nil. The generator is drawn only past fail_first, so
-- that fail_first does not shift the random sequence.
function Service:fault(n)
  local why
  if n <= self.fail_first then
    why = "injected failure"
  elseif self.fail_rate > 0 and self.random() < self.fail_rate then
    why = "injected random failure"
  else
    return nil
  end
  local msg = ("%s: %s (call %d)"):format(self.name, why, n)
  if self.error_kind == "fatal" then return mend.fatal(msg) end
  return mend.retryable(msg, { retry_after = self.retry_after })
end

function Service:apply(key, fn_or_value, n)
  local result = fn_or_value
  if type(fn_or_value) == "function" then result = fn_or_value(key, n) end
  if mend.is_error(result) then error(result) end       -- a returned mend error is raised
  if key ~= nil then
    self.recorded[key] = { result = result }
    self.applied[key] = (self.applied[key] or 0) + 1
  end
  self.effects[#self.effects + 1] = { key = key, result = result, call = n }
  return result
end

--- One call of the service with an idempotency key (see the comment at the top).
function Service:call(key, fn_or_value)
  self.calls = self.calls + 1
  local n = self.calls
  self:wait()
  local fault = self:fault(n)
  if fault then error(fault) end
  local result
  local seen = key ~= nil and self.recorded[key]
  if seen then
    result = seen.result
  else
    result = self:apply(key, fn_or_value, n)
  end
  if n <= self.fail_first + self.lose_first then
    error(mend.retryable(("%s: response lost (call %d)"):format(self.name, n),
                         { retry_after = self.retry_after }))
  end
  return result
end

return M
