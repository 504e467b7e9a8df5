#!/usr/bin/env python3
"""An outside client of mend's HTTP API, in the standard library only, as a user of another
language would write it from docs/http-api.md alone: it owns the HTTP side of the acceptance
specs (spec/acceptance_http_*_spec.lua), which start the servers and read what it prints.

    http_client.py BASE GROUP [NAME=VALUE ...]

runs the checks of GROUP against the server at BASE (http://127.0.0.1:PORT) and prints one
line per check, "ok NAME" or "FAIL NAME: why"; exit 0 when every check passed. A check
labelled a defect (DEFECTS below) is skipped, and printed "defect NAME", unless NAME is given
in MEND_ACCEPT_DEFECTS (a comma-separated list, or "all"): the spec keeps it pending, so that
the suite stays green while the defect is there, and runs it on demand. It never reads the
database nor mend's sources: what it knows of mend is what the documents say.
"""
import http.client
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = None
ARGS = {}
GROUPS = {}
# name -> why it is a defect; the check asserts what the document says
DEFECTS = {}


def check(group, defect=None):
    def put(fn):
        GROUPS.setdefault(group, []).append(fn)
        if defect:
            DEFECTS[fn.__name__] = defect
        return fn
    return put


class Answer:
    def __init__(self, status, headers, raw):
        self.status, self.headers, self.raw = status, headers, raw
        self.body = None
        if raw:
            try:
                self.body = json.loads(raw.decode("utf-8"), object_pairs_hook=strict_pairs)
            except ValueError:
                pass

    def header(self, name):
        return self.headers.get(name.lower())

    def __repr__(self):
        return "%d %s" % (self.status, self.raw[:300].decode("utf-8", "replace"))


def strict_pairs(pairs):
    out = {}
    for k, v in pairs:
        assert k not in out, "the server answered a key twice: %r" % k
        out[k] = v
    return out


def request(method, path, body=None, headers=None, raw=None, ctype="application/json",
            token=None, who=None, host=None, timeout=30):
    """One request on a fresh connection; body is JSON-encoded, raw is sent as is."""
    u = urllib.parse.urlsplit(BASE)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    h = {}
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
    if method == "POST" and ctype:
        h["Content-Type"] = ctype
    if token:
        h["Authorization"] = "Bearer " + token
    if who is not None:
        h["X-Mend-Who"] = who
    if host:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host)
    else:
        conn.putrequest(method, path)
    for k, v in list(h.items()) + list((headers or {}).items()):
        conn.putheader(k, v)
    if data is not None or method == "POST":
        conn.putheader("Content-Length", str(len(data or b"")))
    conn.endheaders(data)
    r = conn.getresponse()
    a = Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    conn.close()
    return a


def get(path, **kw):
    return request("GET", path, **kw)


def post(path, body=None, **kw):
    return request("POST", path, body=body, **kw)


def expect(a, status, code=None, says=()):
    """The answer has the status, and for an error the documented shape, code and words."""
    assert a.status == status, "expected %d, got %r" % (status, a)
    ct = a.header("content-type") or ""
    assert ct.startswith("application/json"), "Content-Type %r of %r" % (ct, a)
    if code:
        assert isinstance(a.body, dict) and isinstance(a.body.get("error"), dict), repr(a)
        e = a.body["error"]
        assert e.get("code") == code, "expected code %s, got %r" % (code, a)
        assert isinstance(e.get("message"), str) and e["message"], repr(a)
        for w in says:
            assert w in e["message"], "%r does not name %r" % (e["message"], w)
    return a.body


def start(workflow, input=None, key=None, status=201, **kw):
    body = {"workflow": workflow}
    if input is not None:
        body["input"] = input
    if key is not None:
        body["key"] = key
    b = expect(post("/api/v1/runs", body, **kw), status)
    return b["id"]


def wait_end(run_id, seconds=30):
    b = expect(get("/api/v1/runs/%s?wait=%g" % (run_id, seconds)), 200)
    assert b["wait"] == "ended", "run %s did not end in %gs: %r" % (run_id, seconds, b)
    return b


def wait_status(run_id, pred, what, seconds=15):
    deadline = time.time() + seconds
    while True:
        b = expect(get("/api/v1/runs/" + run_id), 200)
        if pred(b):
            return b
        assert time.time() < deadline, "run %s never %s: %r" % (run_id, what, b)
        time.sleep(0.05)


def waiting_for_event(run_id):
    return wait_status(run_id, lambda b: any(s["name"] == "kill" and s["status"] == "waiting"
                                             for s in b["steps"]), "waited for its event")


def history(run_id, query=""):
    return expect(get("/api/v1/runs/%s/history%s" % (run_id, query)), 200)


def operator_details(run_id):
    return [h["detail"] for h in history(run_id) if h["event"] == "operator"]


# ---- starts ----------------------------------------------------------------------------------

@check("start")
def start_without_key():
    a = post("/api/v1/runs", {"workflow": "acc_wait", "input": {"to": "ann"}})
    b = expect(a, 201)
    assert set(b) == {"id", "workflow", "existed"}, b
    assert b["workflow"] == "acc_wait" and b["existed"] is False, b
    assert re.fullmatch(r"[0-9a-z]{16}", b["id"]), b
    other = start("acc_wait", {"to": "ann"})
    assert other != b["id"], "two starts without a key gave one run"
    run = expect(get("/api/v1/runs/" + b["id"]), 200)
    assert run["input"] == {"to": "ann"} and run.get("key") is None, run


@check("start")
def start_with_key_twice():
    a = expect(post("/api/v1/runs", {"workflow": "acc_wait", "key": "acc-k1", "input": 1}), 201)
    b = expect(post("/api/v1/runs", {"workflow": "acc_wait", "key": "acc-k1", "input": 2}), 200)
    assert b == {"id": a["id"], "workflow": "acc_wait", "existed": True}, b
    run = expect(get("/api/v1/runs/" + a["id"]), 200)
    assert run["input"] == 1 and run["key"] == "acc-k1", run
    c = expect(post("/api/v1/runs", {"workflow": "acc_many", "key": "acc-k1"}), 409, "key_conflict",
               (a["id"], "acc_wait"))
    assert c
    listed = expect(get("/api/v1/runs?workflow=acc_many"), 200)["runs"]
    assert not any(r.get("key") == "acc-k1" for r in listed), "a refused start was recorded"


@check("start")
def start_input_defaults_to_null():
    rid = start("acc_wait", key=None)
    run = expect(get("/api/v1/runs/" + rid), 200)
    assert "input" in run and run["input"] is None, run
    # a null field is a field not given
    b = expect(post("/api/v1/runs", {"workflow": "acc_wait", "input": None, "key": None}), 201)
    assert expect(get("/api/v1/runs/" + b["id"]), 200).get("key") is None


@check("start")
def start_refusals():
    expect(post("/api/v1/runs", {"input": 1}), 400, "missing_field", ("workflow",))
    expect(post("/api/v1/runs", {"workflow": 5}), 400, "bad_field", ("workflow",))
    expect(post("/api/v1/runs", {"workflow": "acc_wait", "imput": 1}), 400, "unknown_field",
           ("imput", "workflow", "input", "key"))
    expect(post("/api/v1/runs", {"workflow": "acc_wait", "key": ""}), 400)
    expect(post("/api/v1/runs", {"workflow": "nope"}), 404, "unknown_workflow", ("nope",))
    expect(post("/api/v1/runs", raw=b'{"workflow":"acc_wait","workflow":"acc_many"}'), 400,
           "bad_json", ("workflow",))
    expect(post("/api/v1/runs", raw=b'{"workflow":"acc_wait","input":{"a":1,"a":2}}'), 400,
           "bad_json", ("a",))
    expect(post("/api/v1/runs", raw=b'{"workflow":'), 400, "bad_json")
    expect(post("/api/v1/runs", raw=b'["acc_wait"]'), 400, "bad_json")
    expect(post("/api/v1/runs", raw=b''), 400)
    expect(post("/api/v1/runs", raw=b'{"workflow":"acc_wait","input":"a\\u0000b"}'), 400, "bad_json")
    expect(post("/api/v1/runs", raw=b'{"workflow":"acc_wait","input":18446744073709552000}'), 400,
           "bad_json")
    expect(post("/api/v1/runs", {"workflow": "acc_wait"}, ctype=None), 415, "unsupported_media_type")
    for ct in ("application/json; charset=utf-8", "Application/JSON"):   # what clients send
        expect(post("/api/v1/runs", {"workflow": "acc_wait"}, ctype=ct), 201)
    expect(post("/api/v1/runs", {"workflow": "acc_wait"}, ctype="application/jsonx"), 415,
           "unsupported_media_type")
    expect(post("/api/v1/runs", {"workflow": "acc_wait"}, ctype="text/plain"), 415,
           "unsupported_media_type")


@check("start")
def start_numbers_kept_exact():
    raw = b'{"workflow":"acc_wait","input":{"big":9223372036854775807,"small":-9223372036854775808,' \
          b'"d":1.8446744073709552e19,"f":0.1}}'
    b = expect(post("/api/v1/runs", raw=raw), 201)
    run = expect(get("/api/v1/runs/" + b["id"]), 200)
    i = run["input"]
    assert i["big"] == 9223372036854775807 and i["small"] == -9223372036854775808, i
    assert i["d"] == 1.8446744073709552e19 and i["f"] == 0.1, i


@check("start")
def start_with_urllib():
    # the way a Python user writes it first
    req = urllib.request.Request(BASE + "/api/v1/runs", data=json.dumps({"workflow": "acc_wait"}).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
        assert json.loads(r.read())["existed"] is False


# ---- the list ----------------------------------------------------------------------------

@check("list")
def list_filters():
    ids = [start("acc_many", {"n": 1}) for _ in range(3)]
    for rid in ids:
        wait_end(rid)
    waiting = start("acc_wait")
    b = expect(get("/api/v1/runs?workflow=acc_many&status=succeeded&limit=1000"), 200)
    assert set(b) == {"runs", "next_cursor"}, b
    got = [r["id"] for r in b["runs"]]
    assert set(ids) <= set(got) and waiting not in got, b
    assert all(r["workflow"] == "acc_many" and r["status"] == "succeeded" for r in b["runs"]), b
    assert b["next_cursor"] is None, b
    run = expect(get("/api/v1/runs?status=running&limit=1000"), 200)["runs"]
    assert waiting in [r["id"] for r in run] and all(r["status"] == "running" for r in run)
    # newest first
    created = [r["created"] for r in b["runs"]]
    assert created == sorted(created, reverse=True), created
    assert expect(get("/api/v1/runs?since=%d" % (time.time() + 3600)), 200)["runs"] == []
    assert len(expect(get("/api/v1/runs?since=0&limit=1000"), 200)["runs"]) >= 4
    # a name or value may be percent-encoded
    enc = expect(get("/api/v1/runs?%77orkflow=acc%5Fmany&limit=1000"), 200)["runs"]
    assert sorted(r["id"] for r in enc) == sorted(r["id"] for r in
                                                  expect(get("/api/v1/runs?workflow=acc_many&limit=1000"), 200)["runs"])


@check("list")
def list_pages_while_runs_are_created():
    before = [start("acc_wait", {"page": i}) for i in range(7)]
    seen, cursor, pages = [], None, 0
    first = expect(get("/api/v1/runs?workflow=acc_wait&limit=1000"), 200)["runs"]
    while True:
        q = {"workflow": "acc_wait", "limit": "3"}
        if cursor is not None:
            q["cursor"] = cursor
        b = expect(get("/api/v1/runs?" + urllib.parse.urlencode(q)), 200)
        assert len(b["runs"]) <= 3, b
        seen += [r["id"] for r in b["runs"]]
        pages += 1
        start("acc_wait", {"during": pages})   # created meanwhile: shifts no later page
        cursor = b["next_cursor"]
        if cursor is None:
            break
        assert pages < 100
    assert seen == [r["id"] for r in first], "pages %r, list %r" % (seen, [r["id"] for r in first])
    assert set(before) <= set(seen)
    assert len(seen) == len(set(seen)), "a run came twice"


@check("list")
def list_refusals():
    expect(get("/api/v1/runs?limt=5"), 400, "bad_query",
           ('unknown query parameter "limt": GET /api/v1/runs takes status, workflow, since, limit, cursor',))
    expect(get("/api/v1/runs?workflow="), 400, "bad_query", ("workflow",))
    expect(get("/api/v1/runs?limit=5&limit=6"), 400, "bad_query", ("limit",))
    for bad in ("0", "1001", "-1", "+5", "%205", "0x10", "five"):
        expect(get("/api/v1/runs?limit=" + bad), 400, "bad_query", ("limit",))
    expect(get("/api/v1/runs?status=sleeping"), 400, "bad_query", ("status",))
    expect(get("/api/v1/runs?since=yesterday"), 400, "bad_query", ("since",))
    expect(get("/api/v1/runs?cursor=not-a-cursor"), 400, "bad_query", ("cursor",))
    assert len(expect(get("/api/v1/runs?limit=1000"), 200)["runs"]) >= 1


# ---- a run, paths, methods -----------------------------------------------------------------

@check("run")
def run_object():
    rid = start("acc_wait", {"x": 1}, key="acc-run-1")
    waiting_for_event(rid)
    run = expect(get("/api/v1/runs/" + rid), 200)
    # a field with no value is left out (docs/http-api.md, Conventions)
    for f in ("id", "workflow", "version", "status", "input", "key", "attention", "created",
              "updated", "steps"):
        assert f in run, "no %s in %r" % (f, run)
    assert "error" not in run and "reason" not in run, run
    assert run["id"] == rid and run["workflow"] == "acc_wait" and run["status"] == "running"
    assert isinstance(run["created"], (int, float)) and abs(run["created"] - time.time()) < 60, run
    names = [s["name"] for s in run["steps"]]
    assert names == ["first", "kill", "after"], names
    for s in run["steps"]:
        for f in ("name", "status", "attempts"):
            assert f in s, "no %s in step %r" % (f, s)
    assert run["steps"][0]["status"] == "succeeded" and run["steps"][0]["result"] == {"n": 1}
    assert run["steps"][1]["status"] == "waiting"


@check("run")
def paths_and_methods():
    expect(get("/api/v1/runs/0000000000000000"), 404, "not_found")
    expect(get("/api/v1/runs/"), 404, "not_found")
    expect(get("/api/v1/runs//history"), 404, "not_found")
    expect(get("/api/v1/nothing"), 404, "not_found")
    a = get("/metrics/")
    assert a.status == 404, a
    assert expect(get("//api/v1/runs?limit=1"), 200)["runs"] is not None
    endpoints = json.dumps(expect(get("/api/v1"), 200))
    for e in ("GET /api/v1/runs", "POST /api/v1/runs", "GET /api/v1/runs/{id}",
              "GET /api/v1/runs/{id}/history", "GET /api/v1/runs/{id}/events",
              "POST /api/v1/runs/{id}/cancel", "POST /api/v1/runs/{id}/events",
              "POST /api/v1/events", "GET /api/v1/dlq", "POST /api/v1/dlq/{id}/retry",
              "POST /api/v1/dlq/{id}/resolve", "GET /api/v1/breakers",
              "POST /api/v1/breakers/{key}/", "GET /api/v1/workflows",
              "GET /api/v1/workflows/{name}", "GET /metrics"):
        assert e in endpoints, "%s is not listed: %s" % (e, endpoints)
    a = request("DELETE", "/api/v1/runs")
    expect(a, 405, "method_not_allowed")
    assert "GET" in (a.header("allow") or "") and "POST" in a.header("allow"), a.headers
    rid = start("acc_wait")
    a = get("/api/v1/runs/%s/cancel" % rid)
    expect(a, 405, "method_not_allowed")
    assert a.header("allow") == "POST", a.headers
    a = post("/api/v1/runs/" + rid, {})
    expect(a, 405, "method_not_allowed")
    assert "GET" in a.header("allow") and "POST" not in a.header("allow"), a.headers


@check("run")
def workflows_listed():
    b = expect(get("/api/v1/workflows"), 200)
    assert isinstance(b, list) and b, b
    names = {w["workflow"] for w in b}
    assert {"acc_wait", "acc_many"} <= names, names
    for f in ("workflow", "version", "first_seen", "sources", "kept", "step_names", "unfinished",
              "unavailable"):
        assert f in b[0], "no %s in %r" % (f, b[0])
    one = expect(get("/api/v1/workflows/acc_wait"), 200)
    assert one and all(w["workflow"] == "acc_wait" for w in one), one
    assert one[0]["step_names"] == ["first", "kill", "after"], one[0]
    expect(get("/api/v1/workflows/no_such"), 404)


# ---- history pages ---------------------------------------------------------------------------

def long_run():
    rid = start("acc_many", {"n": 20})
    assert wait_end(rid)["status"] == "succeeded"
    return rid


@check("history")
def history_pages():
    rid = long_run()
    whole = history(rid)
    n = len(whole)
    assert n > 40, n
    assert [h["seq"] for h in whole] == list(range(1, n + 1)), [h["seq"] for h in whole]
    for h in whole:
        assert set(h) <= {"seq", "at", "step", "event", "from", "to", "attempt", "error", "delay",
                          "detail", "worker", "run_id"}, h
        assert {"seq", "at", "event"} <= set(h), h
    assert any({"step", "from", "to", "attempt"} <= set(h) for h in whole), whole[:5]
    assert get("/api/v1/runs/%s/history" % rid).header("link") is None
    # follow the Link header to the end
    path, pages, rows = "/api/v1/runs/%s/history?limit=7" % rid, 0, []
    while path:
        a = get(path)
        page = expect(a, 200)
        rows += page
        pages += 1
        link = a.header("link")
        if link is None:
            break
        m = re.fullmatch(r'<([^>]+)>; rel="next"', link)
        assert m, link
        last = page[-1]["seq"]
        assert m.group(1) == "/api/v1/runs/%s/history?after=%d&limit=7" % (rid, last), link
        path = m.group(1)
        assert pages < 100
    assert rows == whole, "the pages differ from the whole"
    assert pages == (n + 6) // 7, (pages, n)
    # by the rule alone: ask again with after = last seq until fewer than limit come back
    after, rows = 0, []
    while True:
        page = history(rid, "?after=%d&limit=10" % after)
        rows += page
        if len(page) < 10:
            break
        after = page[-1]["seq"]
    assert rows == whole
    assert history(rid, "?tail=5") == whole[-5:]
    assert history(rid, "?tail=10000") == whole
    assert history(rid, "?after=%d" % n) == []
    assert history(rid, "?after=%d" % (n + 50)) == []


@check("history")
def history_last_full_page_has_no_link():
    rid = long_run()
    n = len(history(rid))
    a = get("/api/v1/runs/%s/history?limit=%d" % (rid, n))
    assert len(expect(a, 200)) == n
    assert a.header("link") is None, "a page that ends the history has a Link: %r" % a.header("link")


@check("history")
def history_default_page_is_1000():
    rid = start("acc_many", {"n": 520})
    assert wait_end(rid, 60)["status"] == "succeeded"
    a = get("/api/v1/runs/%s/history" % rid)
    first = expect(a, 200)
    assert len(first) == 1000, len(first)
    assert a.header("link") == '</api/v1/runs/%s/history?after=1000&limit=1000>; rel="next"' % rid, \
        a.header("link")
    rest = history(rid, "?after=1000")
    assert 0 < len(rest) < 1000 and rest[0]["seq"] == 1001, len(rest)
    assert history(rid, "?tail=3") == rest[-3:]


@check("history")
def history_refusals():
    rid = long_run()
    for q in ("limit=0", "limit=10001", "after=-1", "after=abc", "tail=0", "tail=10001",
              "tail=3&after=1", "tail=3&limit=5", "limit=1.5", "lmit=3", "after=1&after=2"):
        name = re.match(r"(\w+)", q).group(1)
        expect(get("/api/v1/runs/%s/history?%s" % (rid, q)), 400, "bad_query", (name,))
    expect(get("/api/v1/runs/0000000000000000/history"), 404, "not_found")
    expect(get("/api/v1/runs/0000000000000000/history?after=5"), 404, "not_found")


# ---- the long poll ---------------------------------------------------------------------------

@check("wait")
def wait_answers():
    rid = start("acc_wait")
    waiting_for_event(rid)
    t0 = time.time()
    b = expect(get("/api/v1/runs/%s?wait=0" % rid), 200)
    assert b["wait"] == "timeout" and b["status"] == "running" and time.time() - t0 < 1, b
    t0 = time.time()
    b = expect(get("/api/v1/runs/%s?wait=0.5" % rid), 200)
    took = time.time() - t0
    assert b["wait"] == "timeout" and 0.4 <= took < 3, (b, took)
    out = {}

    def waiter():
        out["a"] = get("/api/v1/runs/%s?wait=30" % rid)
        out["at"] = time.time()
    th = threading.Thread(target=waiter)
    th.start()
    deadline = time.time() + 5
    while True:
        m = get("/metrics").raw.decode()
        if re.search(r"^mend_http_waiting_requests 1\s*$", m, re.M):
            break
        assert time.time() < deadline, "mend_http_waiting_requests never counted the wait"
        time.sleep(0.05)
    sent = time.time()
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "go", "data": {"gold": 5}}), 202)
    th.join(30)
    b = expect(out["a"], 200)
    assert b["wait"] == "ended" and b["status"] == "succeeded", b
    assert out["at"] - sent < 5, out["at"] - sent
    assert b["steps"][2]["result"] == {"gold": 5}, b["steps"]
    t0 = time.time()
    assert expect(get("/api/v1/runs/%s?wait=60" % rid), 200)["wait"] == "ended"
    assert time.time() - t0 < 1
    t0 = time.time()
    expect(get("/api/v1/runs/0000000000000000?wait=30"), 404, "not_found")
    assert time.time() - t0 < 1
    for bad in ("61", "abc", "-1", "", "1e1"):
        expect(get("/api/v1/runs/%s?wait=%s" % (rid, bad)), 400, "bad_query", ("wait",))
    expect(get("/api/v1/runs/%s?wat=1" % rid), 400, "bad_query", ("wat",))


@check("wait")
def wait_busy_past_192():
    rid = start("acc_wait")
    waiting_for_event(rid)
    answers = []
    lock = threading.Lock()

    def waiter():
        a = get("/api/v1/runs/%s?wait=30" % rid, timeout=60)
        with lock:
            answers.append(a)
    threads = [threading.Thread(target=waiter) for _ in range(192)]
    for t in threads:
        t.start()
    deadline = time.time() + 20
    while not re.search(r"^mend_http_waiting_requests 192\s*$", get("/metrics").raw.decode(), re.M):
        assert time.time() < deadline, "192 waits were never counted"
        time.sleep(0.1)
    t0 = time.time()
    b = expect(get("/api/v1/runs/%s?wait=30" % rid), 200)
    assert b["wait"] == "busy" and b["status"] == "running" and time.time() - t0 < 2, b
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "go"}), 202)
    for t in threads:
        t.join(60)
    assert len(answers) == 192
    assert all(a.status == 200 and a.body["wait"] == "ended" for a in answers), \
        [a for a in answers if a.status != 200 or a.body["wait"] != "ended"][:3]


def waiting_count():
    m = re.search(r"^mend_http_waiting_requests (\d+)\s*$", get("/metrics").raw.decode(), re.M)
    return int(m.group(1))


@check("wait")
def wait_let_go_when_the_client_leaves():
    rid = start("acc_wait")
    waiting_for_event(rid)
    u = urllib.parse.urlsplit(BASE)
    for how in ("close", "shut_wr"):
        s = socket.create_connection((u.hostname, u.port), timeout=10)
        s.sendall(("GET /api/v1/runs/%s?wait=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % rid).encode())
        deadline = time.time() + 5
        while waiting_count() != 1:
            assert time.time() < deadline, "the wait was never counted"
            time.sleep(0.05)
        if how == "close":
            s.close()
        else:
            s.shutdown(socket.SHUT_WR)
        gone = time.time()
        while waiting_count() != 0:
            assert time.time() - gone < 3, "a client gone (%s) was not let go" % how
            time.sleep(0.05)
        s.close()


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
    req = urllib.request.Request(BASE + "/api/v1/runs", data=json.dumps({"workflow": "acc_wait",
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
    u = urllib.parse.urlsplit(BASE)
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
    u = urllib.parse.urlsplit(BASE)
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
def query_on_post_refused():
    expect(post("/api/v1/runs?x=1", {"workflow": "acc_wait"}), 400, "bad_query", ("x",))



# ---- defects: what the documents say and mend does not do ----------------------------------

@check("defects", defect="a start and an event record no X-Mend-Who (only repairs do)")
def who_recorded_for_start_and_event():
    # "Every operation is recorded with who did it ... the name a client gives in X-Mend-Who"
    rid = start("acc_wait", who="zed")
    waiting_for_event(rid)
    expect(post("/api/v1/runs/%s/events" % rid, {"name": "go", "data": 1}, who="yan"), 202)
    wait_end(rid)
    seen = json.dumps(expect(get("/api/v1/runs/" + rid), 200)) + json.dumps(history(rid)) + \
        json.dumps(expect(get("/api/v1/runs/%s/events" % rid), 200))
    assert "zed via http" in seen, "the start's who is nowhere: %s" % seen[:1500]
    assert "yan via http" in seen, "the event's who is nowhere: %s" % seen[:1500]


def main():
    global BASE
    BASE = sys.argv[1].rstrip("/")
    group = sys.argv[2]
    for a in sys.argv[3:]:
        k, v = a.split("=", 1)
        ARGS[k] = v
    run_defects = set(filter(None, os.environ.get("MEND_ACCEPT_DEFECTS", "").split(",")))
    failed = 0
    for fn in GROUPS[group]:
        name = fn.__name__
        if name in DEFECTS and not ({"all", name} & run_defects):
            print("defect %s: %s" % (name, DEFECTS[name]))
            continue
        try:
            fn()
            print("ok " + name)
        except Exception as e:   # a check's failure, whatever raised it
            failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e))
        sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
