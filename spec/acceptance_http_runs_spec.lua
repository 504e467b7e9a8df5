-- Acceptance of the HTTP API from another language (docs/http-api.md): starts, the list and
-- its cursor, a run, its history pages and the long poll, as a Python client sees them
-- (spec/support/http_client.py) against a real `mend worker --listen` on a loopback port.
local A = require "spec.support.acceptance_http"
local H = require "spec.helper"

describe("the HTTP API from Python: runs", function()
  local base
  setup(function() base = A.server("worker") end)
  teardown(function() A.stop_all() H.cleanup() end)

  it("starts runs with and without a key, the same key again, and refuses what it documents", function()
    A.client(base, "start")
  end)

  it("lists runs by status, workflow and since, newest first, in pages by the cursor while runs are created", function()
    A.client(base, "list")
  end)

  it("reads a run and its steps; paths, methods and workflows as documented", function()
    A.client(base, "run")
  end)

  it("pages a history by after, limit and tail and by its Link header", function()
    A.client(base, "history")
  end)

  it("holds ?wait= until the run ends or the time passes, counted in /metrics", function()
    A.client(base, "wait")
  end)
end)
