-- Acceptance of the HTTP API from another language (docs/http-api.md): events and the inbox,
-- cancel, a start and an event with who did them (X-Mend-Who) recorded, the dead-letter
-- queue's retry and resolve, breakers and /metrics' families, as a Python client sees them
-- (spec/support/http_client.py) against a real `mend worker --listen` on a loopback port.
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

  -- docs/http-api.md, Security: "Every operation is recorded with who did it": a start in its
  -- run's history (a `started` row), an event with itself in the run's inbox.
  it("records who started a run (its history) and who sent an event (the inbox)", function()
    A.client(base, "who")
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
