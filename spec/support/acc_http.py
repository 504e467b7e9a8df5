"""The harness of spec/support/http_client.py: one request on a fresh connection, the
documented error shape checked, the checks' registry, and small helpers over the API (a start,
a wait for a run's end, its history). Standard library only; it knows mend from
docs/http-api.md alone. Must never read the database or mend's sources."""
import http.client
import json
import time
import urllib.parse

BASE = None   # set by http_client.py: http://127.0.0.1:PORT
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
