-- PostgreSQL's errors as a person reads them: libpq's message on one line, every host's cause
-- kept. A URI of several hosts (which the store supports, src/store/pg/pg.c) has libpq tell
-- each host's failure in turn: the first ("port 1 failed: Connection refused") says nothing of
-- the server that answered and refused the password. PostgreSQL only (MEND_TEST_PG).
local H = require "spec.helper"
local it_pg = H.PG and it or pending

describe("a URI of several hosts, the one that answers refusing the password (PostgreSQL)", function()
  it_pg("mend's error names the password refused, not only the first host's refusal", function()
    local bad = H.pg_wrong_password("mend"):gsub("@([^/:]+):(%d+)/", "@%1:1,%1:%2/")
    assert.matches(":1,", bad)
    local rc, out, err = H.mend_in(nil, bad, "dlq")
    assert.are.equal(1, rc, out .. err)
    assert.matches("password authentication failed", err)
  end)
end)
