-- workflows/order_http.lua through `mend run`, against workflows/order_service.py on
-- 127.0.0.1: a 429 and a 503 are retried with no second effect, a declined card's 402
-- compensates the reservation.
local mend = require "mend"
local H = require "spec.helper"

local svc = {}

local function stats()
  local p = assert(io.popen("python3 -c 'import urllib.request, sys; sys.stdout.write("
    .. "urllib.request.urlopen(\"" .. svc.base .. "/stats\").read().decode())'"))
  local text = p:read("a")
  p:close()
  return mend.json.decode(text)
end

local function run(input)
  input.service = svc.base
  return H.shell(H.MEND .. " run workflows/order_http.lua --clock virtual --log-level error --db "
                 .. H.quote(H.new_db()) .. " --input " .. H.quote(mend.json.encode(input)))
end

describe("workflows/order_http.lua", function()
  setup(function()
    svc.pipe = assert(io.popen("python3 workflows/order_service.py --busy 1 --flaky 1 & echo"))
    local line = svc.pipe:read("l")
    while line == "" do line = svc.pipe:read("l") end
    local port, pid = tostring(line):match("^(%d+) (%d+)$")
    assert(port, "the order service did not start: " .. tostring(line))
    svc.pid, svc.base = pid, "http://127.0.0.1:" .. port
  end)
  teardown(function()
    if svc.pid then os.execute("kill " .. svc.pid) end
    if svc.pipe then svc.pipe:close() end
  end)
  after_each(H.cleanup)

  it("retries the gateway's 429 and the shipper's 503, each effect applied once", function()
    local rc, out = run({})
    assert.are.equal(0, rc, out)
    assert.matches("HTTP 429 from POST", out)
    assert.matches("delay 1s", out)          -- the gateway's Retry-After, not the backoff
    assert.matches("HTTP 503 from POST", out)
    -- the timeline names each attempt's request
    assert.matches("%[POST http://127%.0%.0%.1:%d+/payments/charge %-> 429 %(", out)
    local s = stats()
    assert.are.equal(2, s.calls["/payments/charge"])
    assert.are.equal(1, s.effects["/payments/charge"])
    assert.are.equal(1, s.effects["/shipping/ship"])
  end)

  it("compensates the reservation when the card is declined (402, not retried)", function()
    local before = stats()
    local rc, out = run({ card = "declined" })
    assert.are.equal(3, rc, out)
    assert.matches("HTTP 402 from POST", out)
    local s = stats()
    assert.are.equal((before.calls["/payments/charge"] or 0) + 1, s.calls["/payments/charge"])
    assert.are.equal(before.effects["/payments/charge"], s.effects["/payments/charge"])
    assert.are.equal(1, s.effects["/inventory/release"])
  end)
end)
