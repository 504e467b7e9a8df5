-- Acceptance of the HTTP API from another language (docs/http-api.md): the body and header
-- limits, a broken framing, the token and Host rules, and `mend serve` alone (runs recorded
-- for workers, a workflow that fails to load), as a Python client sees them
-- (spec/support/http_client.py) against real servers on loopback ports.
local A = require "spec.support.acceptance_http"
local H = require "spec.helper"

describe("the HTTP API from Python: limits, tokens, serve", function()
  after_each(function() A.stop_all() end)
  teardown(function() H.cleanup() end)

  it("refuses a body over --max-body (413, urllib included), headers over 16 KiB, a broken chunked body; 256 connections at most, idle ones closed", function()
    local base = A.server("worker", "--max-body 4096")
    A.client(base, "limits", { max_body = 4096 })
  end)

  it("needs the token for changes, checks one sent, and for every request addressed to another name", function()
    local dir = H.tmp_dir()
    local token = H.write_file(dir, "token", "  acceptance-token-0123456789\n")
    local base = A.server("worker", "--token-file " .. H.quote(token))
    A.client(base, "token", { token_file = token })
  end)

  it("refuses a request addressed to another name without a token (bad_header)", function()
    local base = A.server("worker")
    A.client(base, "host")
  end)

  it("mend serve records runs for workers, cancels them, and answers 503 for a workflow that fails to load", function()
    local base = A.server("serve", nil, true)
    A.client(base, "serve")
  end)
end)

describe("the HTTP API from Python: stopping, browsers", function()
  after_each(function() A.stop_all() end)
  teardown(function() H.cleanup() end)

  it("answers a waiting request \"stopping\" as the server stops", function()
    local base = A.server("worker")
    local servers = require("spec.support.serve_harness").servers
    A.client(base, "stopping", { pid = servers[#servers] })
  end)

  it("sends CORS headers and answers preflights with --cors", function()
    local base = A.server("worker", "--cors http://app.example:8080")
    A.client(base, "cors", { origin = "http://app.example:8080" })
  end)
end)

describe("mend serve's flags as docs/http-api.md (Security) gives them", function()
  after_each(function() A.stop_all() end)
  teardown(function() H.cleanup() end)

  -- `mend serve` with flags it must refuse: its exit code and output. A flag taken by mistake
  -- would leave a server listening for good: it is stopped after a bound far above a refusal's
  -- time on a loaded machine, and the check fails naming the flags rather than hanging.
  local BOUND = 60
  local function serve(dir, flags)
    local p = assert(io.popen(("timeout -k 5 %d %s serve --db %s --workflows %s %s 2>&1"):format(
      BOUND, H.quote(H.MEND), H.quote(dir .. "/flags.db"), H.quote(dir), flags)))
    local out = p:read("a")
    local _, _, code = p:close()
    assert(code ~= 124 and code ~= 137, ("mend serve %s was taken: it still ran after %d s\n%s")
      :format(flags, BOUND, out))
    return code, out
  end

  it("refuses a non-loopback address without a token, a bad --cors or --listen: usage errors, exit 2", function()
    local dir = A.workspace()
    for _, case in ipairs {
      { "--listen 0.0.0.0:0", "--listen" }, { "--listen '[::]:0'", "--listen" },
      { "--listen nowhere", "--listen" }, { "--listen 127.0.0.1:0 --cors '*'", "--cors" },
      { "--listen 127.0.0.1:0 --cors http://a.example/path", "--cors" },
      { "--listen 127.0.0.1:0 --cors ''", "--cors" },
    } do
      local code, out = serve(dir, case[1])
      assert.are.equal(2, code, case[1] .. ": " .. out)
      assert.truthy(out:find(case[2], 1, true), case[1] .. ": " .. out)
    end
  end)

  it("exits 1 naming an address the system will not give (a port in use)", function()
    local base = A.server("serve")
    local taken = base:match("(127%.0%.0%.1:%d+)")
    local code, out = serve(A.workspace(), "--listen " .. taken)
    assert.are.equal(1, code, out)
    assert.truthy(out:find(taken, 1, true), out)
  end)
end)
