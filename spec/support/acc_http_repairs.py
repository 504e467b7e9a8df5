"""The checks of events and the inbox, cancel and X-Mend-Who, the dead-letter queue, breakers,
/metrics, the limits, tokens and Host, mend serve alone, a server stopping and CORS, and the
defects kept pending; run by spec/support/http_client.py for the other acceptance_http specs."""
import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import acc_http
from acc_http import (ARGS, check, expect, get, history, operator_details, post, request, start,
                      wait_end, waiting_for_event)


# ---- events -------------------------------------------------------------------------------

@check("events")
def events_and_inbox():
    rid = start("acc_wait", key="acc-ev-1")
    a = expect(post("/api/v1/runs/%s/events" % rid, {"name": "note", "data": [1, 2]}), 202)
    assert a == {"run": rid, "event": "note", "sent": True}, a
    a = expect(post("/api/v1/runs/%s/events" % rid, {"name": "note", "key": "n-1"}), 202)
    assert a.get("sent") is True, a
    d = expect(post("/api/v1/runs/%s/events" % rid, {"name": "note", "key": "n-1", "data": 9}), 200)
    assert d.get("duplicate") is True, d
    k = expect(post("/api/v1/events", {"run_key": "acc-ev-1", "name": "go", "data": {"gold": 50},
                                       "key": "go-1"}), 202)
    assert k.get("run") == rid and k.get("sent") is True, k
    end = wait_end(rid)
    assert end["status"] == "succeeded" and end["steps"][2]["result"] == {"gold": 50}, end
    inbox = expect(get("/api/v1/runs/%s/events" % rid), 200)
    assert [e["name"] for e in inbox] == ["note", "note", "go"], inbox
    assert [e["seq"] for e in inbox] == sorted(e["seq"] for e in inbox)
    for e in inbox:
        for f in ("seq", "name", "sent"):
            assert f in e, "no %s in %r" % (f, e)
    assert inbox[0]["payload"] == [1, 2] and inbox[1]["key"] == "n-1", inbox
    assert inbox[1].get("payload") is None, inbox
    assert inbox[2].get("consumed") and inbox[2].get("step") == "kill", inbox
    assert inbox[2]["payload"] == {"gold": 50}, inbox
    assert not inbox[0].get("consumed"), inbox[0]
    # the run has ended: a new event is 409, a key sent before is still a duplicate
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "note"}), 409, "conflict")
    d = expect(post("/api/v1/runs/%s/events" % rid, {"name": "note", "key": "n-1"}), 200)
    assert d.get("duplicate") is True, d
    d = expect(post("/api/v1/events", {"run_key": "acc-ev-1", "name": "go", "key": "go-1"}), 200)
    assert d.get("duplicate") is True, d


@check("events")
def event_refusals():
    rid = start("acc_wait")
    expect(post("/api/v1/runs/%s/events" % rid, {"data": 1}), 400, "missing_field", ("name",))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "x", "dat": 1}), 400, "unknown_field",
           ("dat",))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": 5}), 400, "bad_field", ("name",))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "x", "key": ""}), 400)
    expect(post("/api/v1/runs/0000000000000000/events", {"name": "x"}), 404, "not_found")
    expect(post("/api/v1/events", {"run_key": "no-such-key", "name": "x"}), 404, "not_found")
    expect(post("/api/v1/events", {"name": "x"}), 400, "missing_field", ("run_key",))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "x"}, ctype=None), 415)
    assert expect(get("/api/v1/runs/%s/events" % rid), 200) == []
    expect(get("/api/v1/runs/0000000000000000/events"), 404, "not_found")


@check("events")
def names_and_keys_past_their_longest():
    # a value a field refuses is 400 bad_field naming the field (Conventions); the longest
    # name is 512 bytes, the longest run key or event key 1024 (README: Limits)
    rid = start("acc_wait", key="k" * 1024)      # the longest key is taken
    expect(post("/api/v1/runs", {"workflow": "acc_wait", "key": "k" * 1025}), 400, "bad_field",
           ('"key"', "1024"))
    expect(post("/api/v1/runs", {"workflow": "w" * 513}), 400, "bad_field", ('"workflow"', "512"))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "e" * 513}), 400, "bad_field",
           ('"name"', "512"))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "e", "key": "k" * 1025}), 400,
           "bad_field", ('"key"', "1024"))
    expect(post("/api/v1/events", {"run_key": "r" * 1025, "name": "e"}), 400, "bad_field",
           ('"run_key"', "1024"))
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "e" * 512}), 202)


# ---- cancel, who ---------------------------------------------------------------------------

@check("cancel")
def cancel_and_who():
    rid = start("acc_wait")
    waiting_for_event(rid)
    a = expect(post("/api/v1/runs/%s/cancel" % rid, who="alice"), 202)
    assert a["id"] == rid and a["cancel"] in ("cancelling", "requested", "recorded"), a
    end = wait_end(rid)
    assert end["status"] == "compensated", end
    who = operator_details(rid)
    assert any(re.search(r"alice via http 127\.0\.0\.1:\d+ \(mend (serve|worker)\)", d or "")
               for d in who), who
    expect(post("/api/v1/runs/%s/cancel" % rid), 409, "conflict")
    expect(post("/api/v1/runs/0000000000000000/cancel"), 404, "not_found")
    expect(post("/api/v1/runs/%s/cancel" % rid, {"why": 1}), 400, "unknown_field", ("why",))


@check("cancel")
def who_refused():
    rid = start("acc_wait")
    for bad in ("", "x" * 65, "al\tice", "é"):
        a = post("/api/v1/runs/%s/cancel" % rid, headers={"X-Mend-Who": bad.encode("latin-1") if bad == "é" else bad})
        expect(a, 400, "bad_header", ("X-Mend-Who",))
    assert expect(get("/api/v1/runs/" + rid), 200)["status"] == "running"
    a = expect(post("/api/v1/runs/%s/cancel" % rid, who="x" * 64), 202)
    assert a["cancel"]


# ---- the dead-letter queue -------------------------------------------------------------------

def dead_letter(tag):
    flag = os.path.join(ARGS["dir"], "undo-ok-" + tag)
    rid = start("acc_dead", {"flag": flag})
    end = wait_end(rid)
    assert end["status"] == "needs_attention", end
    return rid, flag


@check("dlq")
def dlq_retry():
    rid, flag = dead_letter("retry")
    q = expect(get("/api/v1/dlq"), 200)
    mine = [d for d in q if d["run_id"] == rid]
    assert len(mine) == 1, q
    for f in ("run_id", "reason", "step", "error", "at"):
        assert f in mine[0], "no %s in %r" % (f, mine[0])
    assert mine[0]["reason"] == "compensation_failed" and mine[0]["step"] == "reserve", mine[0]
    expect(post("/api/v1/dlq/%s/resolve" % rid, {}), 400, "missing_field", ("note",))
    expect(post("/api/v1/dlq/%s/retry" % rid, {"now": True}), 400, "unknown_field", ("now",))
    open(flag, "w").close()
    a = expect(post("/api/v1/dlq/%s/retry" % rid, who="bob"), 202)
    assert a == {"id": rid, "dlq": "retrying"}, a
    end = wait_end(rid)
    assert end["status"] == "compensated", end
    assert not [d for d in expect(get("/api/v1/dlq"), 200) if d["run_id"] == rid]
    assert any("bob via http" in (d or "") for d in operator_details(rid)), operator_details(rid)
    expect(post("/api/v1/dlq/%s/retry" % rid), 409, "conflict")
    expect(post("/api/v1/dlq/0000000000000000/retry"), 404, "not_found")
    running = start("acc_wait")
    expect(post("/api/v1/dlq/%s/retry" % running), 409, "conflict")


@check("dlq")
def dlq_resolve():
    rid, _ = dead_letter("resolve")
    expect(post("/api/v1/dlq/%s/resolve" % rid, {"note": 5}), 400, "bad_field", ("note",))
    a = expect(post("/api/v1/dlq/%s/resolve" % rid, {"note": "refunded by hand, ticket 123"}), 200)
    assert a == {"id": rid, "status": "resolved"}, a
    assert expect(get("/api/v1/runs/" + rid), 200)["status"] == "resolved"
    assert any("refunded by hand, ticket 123" in json.dumps(h) for h in history(rid))
    expect(post("/api/v1/dlq/%s/resolve" % rid, {"note": "again"}), 409, "conflict")
    expect(post("/api/v1/dlq/0000000000000000/resolve", {"note": "x"}), 404, "not_found")
    assert expect(get("/api/v1/runs/%s?wait=0" % rid), 200)["wait"] == "ended"


@check("dlq")
def dlq_resolve_empty_note():
    rid, _ = dead_letter("empty")
    expect(post("/api/v1/dlq/%s/resolve" % rid, {"note": ""}), 400)
    assert expect(get("/api/v1/runs/" + rid), 200)["status"] == "needs_attention"


@check("dlq")
def dlq_retry_of_attempts_exhausted_refused():
    rid = start("acc_exhaust")
    end = wait_end(rid)
    assert end["status"] == "needs_attention" and end.get("reason") == "attempts_exhausted", end
    mine = [d for d in expect(get("/api/v1/dlq"), 200) if d["run_id"] == rid]
    assert mine and mine[0]["reason"] == "attempts_exhausted", mine
    expect(post("/api/v1/dlq/%s/retry" % rid), 409, "conflict")
    assert expect(get("/api/v1/runs/" + rid), 200)["status"] == "needs_attention"
    a = expect(post("/api/v1/dlq/%s/resolve" % rid, {"note": "dropped"}), 200)
    assert a["status"] == "resolved", a


# ---- breakers --------------------------------------------------------------------------------

@check("breakers")
def breakers_override():
    wait_end(start("acc_many", {"n": 1}))
    b = expect(get("/api/v1/breakers"), 200)
    mine = [x for x in b if x["key"] == "acc_pay"]
    assert len(mine) == 1, b
    for f in ("key", "state", "failures", "successes", "updated"):
        assert f in mine[0], "no %s in %r" % (f, mine[0])
    assert mine[0]["state"] == "closed"
    keys = [x["key"] for x in b]
    assert keys == sorted(keys), keys
    a = expect(post("/api/v1/breakers/acc_pay/open", {"seconds": 120}, who="carol"), 200)
    assert a == {"key": "acc_pay", "op": "open", "state": "open"}, a
    x = [x for x in expect(get("/api/v1/breakers"), 200) if x["key"] == "acc_pay"][0]
    assert x["state"] == "open" and 100 < x["open_until"] - time.time() <= 121, x
    assert re.search(r'^mend_breaker_state\{key="acc_pay"\} 2\s*$', get("/metrics").raw.decode(), re.M)
    a = expect(post("/api/v1/breakers/acc_pay/close"), 200)   # no body at all
    assert a["state"] == "closed" and a["op"] == "close", a
    a = expect(post("/api/v1/breakers/acc_pay/open"), 200)    # the policy's seconds
    assert a["state"] == "open", a
    a = expect(post("/api/v1/breakers/acc_pay/reset", {}), 200)
    assert a["state"] == "closed" and a["op"] == "reset", a
    expect(post("/api/v1/breakers/acc_pay/close", {"seconds": 5}), 400, "unknown_field", ("seconds",))
    expect(post("/api/v1/breakers/acc_pay/reset", {"seconds": 5}), 400, "unknown_field", ("seconds",))
    for bad in (-1, 0, "x"):
        expect(post("/api/v1/breakers/acc_pay/open", {"seconds": bad}), 400, "bad_field", ("seconds",))
    # a map item's breaker, its key holding a slash, percent-encoded in the path
    assert "items/item" in keys, keys
    a = expect(post("/api/v1/breakers/items%2Fitem/open", {"seconds": 5}), 200)
    assert a == {"key": "items/item", "op": "open", "state": "open"}, a
    expect(post("/api/v1/breakers/items%2Fitem/reset"), 200)
    expect(post("/api/v1/breakers/no_such/open"), 404, "not_found")
    expect(post("/api/v1/breakers/acc_pay/frob"), 404, "not_found")


# ---- metrics -------------------------------------------------------------------------------

@check("metrics")
def metrics_families():
    wait_end(start("acc_many", {"n": 2}))
    start("acc_wait")
    a = get("/metrics?job=mend")
    assert a.status == 200, a
    assert a.header("content-type").startswith("text/plain; version=0.0.4"), a.headers
    text = a.raw.decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    want = {"mend_runs": "gauge", "mend_runs_by_status": "gauge", "mend_dlq_size": "gauge",
            "mend_oldest_unfinished_run_age_seconds": "gauge", "mend_breaker_state": "gauge",
            "mend_http_waiting_requests": "gauge", "mend_runs_started_total": "counter",
            "mend_runs_ended_total": "counter", "mend_step_attempts_total": "counter",
            "mend_step_failures_total": "counter", "mend_step_retries_total": "counter",
            "mend_commit_batches_total": "counter", "mend_commit_latency_seconds": "histogram"}
    for name, kind in want.items():
        assert types.get(name) == kind, "%s: %r" % (name, types.get(name))
    assert "mend_runs_parked" not in types
    for st in ("running", "compensating", "succeeded", "compensated", "failed", "needs_attention",
               "resolved"):
        assert re.search(r'^mend_runs_by_status\{status="%s"\} \d+$' % st, text, re.M), st
    assert re.search(r'^mend_runs\{workflow="acc_many",status="succeeded"\} [1-9]\d*$', text, re.M)
    assert re.search(r'^mend_runs_started_total\{workflow="acc_many"\} [1-9]\d*$', text, re.M)
    assert re.search(r'^mend_runs_ended_total\{workflow="acc_many",status="succeeded"\} [1-9]', text, re.M)
    assert re.search(r'^mend_step_attempts_total\{workflow="acc_many",phase="execute"\} [1-9]', text, re.M)
    assert float(re.search(r"^mend_oldest_unfinished_run_age_seconds (\S+)$", text, re.M).group(1)) >= 0
    batches = int(re.search(r"^mend_commit_batches_total (\d+)$", text, re.M).group(1))
    count = int(re.search(r"^mend_commit_latency_seconds_count (\d+)$", text, re.M).group(1))
    inf = int(re.search(r'^mend_commit_latency_seconds_bucket\{le="\+Inf"\} (\d+)$', text, re.M).group(1))
    assert batches > 0 and count == batches == inf, (batches, count, inf)
    assert re.search(r'^mend_commit_latency_seconds_bucket\{le="0.0001"\} \d+$', text, re.M) or \
        re.search(r'^mend_commit_latency_seconds_bucket\{le="0\.0001"\}', text, re.M), "no 100 us bucket"
    assert re.search(r'^mend_commit_latency_seconds_bucket\{le="2.5"\} \d+$', text, re.M), "no 2.5 s bucket"


# ---- limits and framing ----------------------------------------------------------------------

@check("limits")
def body_over_max_body():
    limit = int(ARGS["max_body"])
    big = {"workflow": "acc_wait", "input": "x" * (limit + 10)}
    expect(post("/api/v1/runs", big), 413, "body_too_large", (str(limit),))
    # urllib writes its whole body before it reads: it gets the 413 too, not a reset
    req = urllib.request.Request(acc_http.BASE + "/api/v1/runs", data=json.dumps({"workflow": "acc_wait",
                                 "input": "y" * (limit * 8)}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("a body over --max-body was taken")
    except urllib.error.HTTPError as e:
        assert e.code == 413, e.code
        assert json.loads(e.read())["error"]["code"] == "body_too_large"
    # just under the limit is taken
    pad = limit - len(json.dumps({"workflow": "acc_wait", "input": ""})) - 2
    expect(post("/api/v1/runs", {"workflow": "acc_wait", "input": "z" * pad}), 201)


@check("limits")
def headers_too_large():
    a = get("/api/v1/runs?limit=1", headers={"X-Filler": "f" * (17 * 1024)})
    expect(a, 431, "headers_too_large")


@check("limits")
def broken_framing():
    u = urllib.parse.urlsplit(acc_http.BASE)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data and data.rstrip().endswith(b"}"):
            break
    s.close()
    head = data.split(b"\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 400"), data[:200]
    body = data.split(b"\r\n\r\n", 1)[1]
    assert b'"bad_request"' in body, data[:400]


# ---- tokens and hosts ------------------------------------------------------------------------

@check("token")
def token_rules():
    tok = open(ARGS["token_file"]).read().strip()
    a = post("/api/v1/runs", {"workflow": "acc_wait"})
    expect(a, 401, "unauthorized")
    assert (a.header("www-authenticate") or "").startswith("Bearer"), a.headers
    expect(post("/api/v1/runs", {"workflow": "acc_wait"}, token="wrong-token-0123456789"), 401,
           "unauthorized")
    expect(get("/api/v1/runs?limit=1"), 200)          # a read needs none on loopback
    expect(get("/api/v1/runs?limit=1", token="wrong-token-0123456789"), 401, "unauthorized")
    assert get("/metrics", token="wrong-token-0123456789").status == 401
    rid = expect(post("/api/v1/runs", {"workflow": "acc_wait"}, token=tok), 201)["id"]
    waiting_for_event(rid)
    expect(post("/api/v1/runs/%s/cancel" % rid, token=tok, who="dave"), 202)
    wait_end(rid)
    assert any(re.search(r"dave via http 127\.0\.0\.1:\d+ \(mend (serve|worker), token\)", d or "")
               for d in operator_details(rid)), operator_details(rid)
    # addressed to another name: beyond loopback, every request needs the token
    expect(get("/api/v1/runs?limit=1", host="evil.example:80"), 401, "unauthorized")
    expect(get("/api/v1/runs?limit=1", host="evil.example:80", token=tok), 200)
    expect(get("/api/v1/runs?limit=1", host="localhost:1"), 200)


@check("host")
def host_without_token():
    expect(get("/api/v1/runs?limit=1", host="evil.example"), 400, "bad_header", ("evil.example",))
    expect(post("/api/v1/runs", {"workflow": "acc_wait"}, host="rebind.example:7070"), 400,
           "bad_header", ("rebind.example",))
    for ok in ("localhost", "127.0.0.1:9", "127.1.2.3", "[::1]:80"):
        expect(get("/api/v1/runs?limit=1", host=ok), 200)


# ---- mend serve alone ------------------------------------------------------------------------

@check("serve")
def serve_records_for_workers():
    rid = start("acc_wait", {"a": 1})
    time.sleep(0.3)
    run = expect(get("/api/v1/runs/" + rid), 200)
    assert run["status"] == "running" and all(s["status"] == "pending" for s in run["steps"]), run
    m = get("/metrics").raw.decode()
    assert re.search(r'^mend_runs_started_total\{workflow="acc_wait"\} [1-9]', m, re.M), m[:2000]
    b = expect(get("/api/v1/runs/%s?wait=0.2" % rid), 200)
    assert b["wait"] == "timeout", b
    a = expect(post("/api/v1/runs/%s/cancel" % rid, who="erin"), 202)
    assert a["cancel"] in ("cancelling", "recorded"), a
    assert wait_end(rid, 10)["status"] in ("compensated", "failed"), rid


@check("serve")
def broken_workflow_is_503():
    expect(post("/api/v1/runs", {"workflow": "acc_broken"}), 503, "workflow_failed_to_load",
           ("acc_broken",))


# ---- a server that stops; browsers -----------------------------------------------------------

@check("stopping")
def wait_answered_stopping():
    rid = start("acc_wait")
    waiting_for_event(rid)
    out = {}

    def waiter():
        out["a"] = get("/api/v1/runs/%s?wait=30" % rid)
    th = threading.Thread(target=waiter)
    th.start()
    deadline = time.time() + 5
    while not re.search(r"^mend_http_waiting_requests 1\s*$", get("/metrics").raw.decode(), re.M):
        assert time.time() < deadline, "the wait was never counted"
        time.sleep(0.05)
    t0 = time.time()
    os.kill(int(ARGS["pid"]), 15)
    th.join(20)
    b = expect(out["a"], 200)
    assert b["wait"] == "stopping" and b["status"] == "running", b
    assert time.time() - t0 < 15


@check("cors")
def cors_headers():
    origin = ARGS["origin"]
    a = get("/api/v1/runs?limit=1", headers={"Origin": origin})
    assert a.status == 200, a
    assert a.header("access-control-allow-origin") == origin, a.headers
    assert "Link" in (a.header("access-control-expose-headers") or ""), a.headers
    a = request("OPTIONS", "/api/v1/runs", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, x-mend-who"})
    assert 200 <= a.status < 300, a
    assert a.header("access-control-allow-origin") == origin, a.headers
    assert "POST" in (a.header("access-control-allow-methods") or ""), a.headers
    allow_h = (a.header("access-control-allow-headers") or "").lower()
    assert "content-type" in allow_h and "x-mend-who" in allow_h, a.headers


@check("limits")
def chunked_body_over_max_body():
    limit = int(ARGS["max_body"])
    u = urllib.parse.urlsplit(acc_http.BASE)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    body = json.dumps({"workflow": "acc_wait", "input": "c" * (limit * 2)}).encode()

    def chunks():
        for i in range(0, len(body), 1000):
            yield body[i:i + 1000]
    try:
        conn.request("POST", "/api/v1/runs", body=chunks(), encode_chunked=True,
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    except (BrokenPipeError, ConnectionResetError):
        pass
    r = conn.getresponse()
    raw = r.read()
    assert r.status == 413, (r.status, raw[:200])
    assert json.loads(raw)["error"]["code"] == "body_too_large"


@check("limits")
def connections_capped_and_idle_closed():
    u = urllib.parse.urlsplit(acc_http.BASE)
    held = [socket.create_connection((u.hostname, u.port), timeout=40) for _ in range(256)]
    opened = time.time()
    # The server takes connections in the order they were made: the one past 256 is closed as
    # it is taken, however long the server takes to get to it (a generous bound, a loaded machine).
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    try:
        s.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = s.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    s.close()
    assert got == b"", "a connection past 256 was answered: %r" % got
    for h in held[:10]:
        h.close()
    # once the server has seen those closes, a new connection is answered
    deadline = time.time() + 30
    while True:
        try:
            a = get("/api/v1/runs?limit=1")
            break
        except (ConnectionError, http.client.RemoteDisconnected, socket.timeout):
            assert time.time() < deadline, "no connection answered after 10 of 256 were closed"
            time.sleep(0.05)
    expect(a, 200)
    # an idle keep-alive connection is closed after 10 s (the bound: a loaded machine's slack)
    try:
        got = held[20].recv(10)
    except ConnectionResetError:
        got = b""
    assert got == b"" and time.time() - opened < 35, (got, time.time() - opened)
    for h in held[10:]:
        h.close()


@check("limits")
def query_on_post_refused():
    expect(post("/api/v1/runs?x=1", {"workflow": "acc_wait"}), 400, "bad_query", ("x",))



# ---- who started a run, who sent an event --------------------------------------------------

@check("who")
def who_recorded_for_start_and_event():
    # "Every operation is recorded with who did it ... the name a client gives in X-Mend-Who"
    rid = start("acc_wait", who="zed")
    waiting_for_event(rid)
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "note"}), 202)
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "go", "data": 1}, who="yan"), 202)
    wait_end(rid)
    me = r"via http 127\.0\.0\.1:\d+ \(mend (serve|worker)\)"
    started = [h.get("detail") or "" for h in history(rid) if h.get("event") == "started"]
    assert len(started) == 1 and re.fullmatch(r"by zed " + me, started[0]), started
    inbox = expect(get("/api/v1/runs/%s/events" % rid), 200)
    by_name = {e["name"]: e for e in inbox}
    assert re.fullmatch(r"yan " + me, by_name["go"].get("who") or ""), inbox
    # without the header: the peer alone, as a repair's
    assert re.fullmatch(r"http 127\.0\.0\.1:\d+ \(mend (serve|worker)\)",
                        by_name["note"].get("who") or ""), inbox
