"""The checks of starts, the runs list and its cursor, a run, its history pages and the long
poll (?wait=), as a client in Python writes them from docs/http-api.md; run by
spec/support/http_client.py for spec/acceptance_http_runs_spec.lua."""
import json
import re
import socket
import threading
import time
import urllib.parse
import urllib.request

import acc_http
from acc_http import (check, expect, get, history, post, request, start,
                      wait_end, waiting_for_event)


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
    req = urllib.request.Request(acc_http.BASE + "/api/v1/runs", data=json.dumps({"workflow": "acc_wait"}).encode(),
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
    u = urllib.parse.urlsplit(acc_http.BASE)
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
