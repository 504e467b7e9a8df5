-- Acceptance of the HTTP API from another language (docs/http-api.md): events and the inbox,
-- cancel with X-Mend-Who recorded, the dead-letter queue's retry and resolve, breakers and
-- /metrics' families, as a Python client sees them (spec/support/http_client.py) against a
-- real `mend worker --listen` on a loopback port.
local A = require "spec.support.acceptance_http"
local H = require "spec.helper"

describe("the HTTP API from Python: events and repairs", function()
  local base, dir
  setup(function() base, dir = A.server("worker") end)
  teardown(function() A.stop_all() H.cleanup() end)

  it("sends events by id and by run key, with and without a key; the inbox shows them", function()
    A.client(base, "events")
  end)

  it("cancels a run, recording who asked; refuses what it documents", function()
    A.client(base, "cancel")
  end)

  it("lists dead letters, retries one and resolves another with a note", function()
    A.client(base, "dlq", { dir = dir })
  end)

  it("lists breakers and overrides one: open, close, reset", function()
    A.client(base, "breakers")
  end)

  it("exports every documented family in /metrics", function()
    A.client(base, "metrics")
  end)
end)

describe("the HTTP API from Python: defects", function()
  local base
  setup(function() base = A.server("worker") end)
  teardown(function() A.stop_all() H.cleanup() end)

  -- docs/http-api.md, Security: "Every operation is recorded with who did it ... and the name
  -- a client gives in X-Mend-Who in front". The header is checked on every request, but only
  -- the repairs (cancel, dead-letter retry and resolve, breakers) record it: a start's and an
  -- event's who is dropped, and no answer or history row shows it.
  local name = "who_recorded_for_start_and_event"
  ;(A.wanted(name) and it or pending)(name .. ": defect, a start and an event sent over HTTP " ..
    "record no who (X-Mend-Who checked, then dropped)", function() A.client(base, "defects") end)
end)
