#!/usr/bin/env python3
"""Clients of mend's HTTP API that go on while the serving process is killed and restarted
(spec/serve_kill_spec.lua): they start runs and send events as a user's program written from
docs/http-api.md would, and log every request and its outcome. Must never read the database:
what they know of a run is what the server answered. Standard library only.

    kill_clients.py BASE LOG STOP CLIENTS SEED

CLIENTS threads, each until the file STOP exists: a start of workflow `kill_serve` (its input
says which end the run must reach, `decline`, and whether it waits for two `tick` events,
`events`), with a run key or without; then, to each run of its own that waits for events, the
two ticks in order, each with an event key or without. What a client does when a request gets
no answer (the connection refused, reset or closed before the answer) is what the document
lets it do:

- a start or an event with a key is sent again, with the same key, until it is answered;
- a start without a key is not sent again (a run may or may not exist for it), and asks for
  no events (its input says so), so that no run waits for a client that lost it;
- an event without a key is looked for in the run's inbox (GET .../events) once the server
  answers again, and sent again only if it is not there: a killed server writes nothing more.

Once STOP exists a client starts nothing more, sends the ticks its runs still wait for, and
exits. LOG gets one JSON line per request, flushed as it is written: client, op (`start`,
`event`, `look`), uid (of the run's input, or of the tick), key, ev_key, run (id), status
(none: no answer), err (the class of the failure), body, t0 and t1 (the wall clock).
"""
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.parse

BASE, LOG, STOP, CLIENTS, SEED = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
HOST, PORT = urllib.parse.urlsplit(BASE).hostname, urllib.parse.urlsplit(BASE).port
# A client that waits for the server this long in all gives up (the spec then fails on it).
PATIENCE = 60
log_lock = threading.Lock()
log_file = open(LOG, "a", buffering=1)


def call(method, path, body=None):
    """One request on a fresh connection: (status, decoded body or None, failure class or None)."""
    conn = http.client.HTTPConnection(HOST, PORT, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if method == "POST" else {}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            decoded = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        return r.status, decoded, None
    except ConnectionRefusedError:
        return None, None, "refused"
    except socket.timeout:
        return None, None, "timeout"
    except (OSError, http.client.HTTPException) as e:
        return None, None, type(e).__name__
    finally:
        conn.close()


def record(**fields):
    with log_lock:
        log_file.write(json.dumps(fields) + "\n")


def send(client, op, method, path, body=None, **fields):
    t0 = time.time()
    status, answer, err = call(method, path, body)
    record(client=client, op=op, status=status, err=err, body=answer, t0=t0, t1=time.time(), **fields)
    return status, answer


def ok(status):
    return status is not None and 200 <= status < 300


class Client:
    def __init__(self, n):
        self.n = n
        self.rng = random.Random(SEED * 1000 + n)
        self.serial = 0
        self.waiting = []   # runs of this client that wait for ticks: [id, key, uid, next tick]

    def start(self):
        self.serial += 1
        uid = "c%d-%d" % (self.n, self.serial)
        keyed = self.rng.random() < 0.6
        inp = {"uid": uid, "decline": self.rng.random() < 0.3,
               "events": keyed and self.rng.random() < 0.6}
        body = {"workflow": "kill_serve", "input": inp}
        key = None
        if keyed:
            key = body["key"] = "k-" + uid
        deadline = time.time() + PATIENCE
        while True:
            status, answer = send(self.n, "start", "POST", "/api/v1/runs", body, uid=uid, key=key)
            if status is not None or not keyed or time.time() > deadline:
                break
            time.sleep(0.03)
        if ok(status) and inp["events"]:
            self.waiting.append([answer["id"], key, uid, 1])

    def tick(self):
        """The next tick of the first run that waits for one; done when it was answered or found."""
        run = self.waiting[0]
        rid, run_key, uid, j = run
        tuid = "%s-t%d" % (uid, j)
        keyed = self.rng.random() < 0.5
        body = {"name": "tick", "data": {"uid": tuid}}
        path = "/api/v1/runs/%s/events" % rid
        if keyed:
            body["key"] = "e-" + tuid
            if self.rng.random() < 0.5:   # the run-key endpoint, half of the time
                body["run_key"] = run_key
                path = "/api/v1/events"
        deadline = time.time() + PATIENCE
        while time.time() < deadline:
            status, _ = send(self.n, "event", "POST", path, body, uid=tuid, run=rid,
                             ev_key=body.get("key"))
            if status is not None:
                break
            if keyed:
                time.sleep(0.03)
                continue
            # Without a key: look once the server answers, send again only if it is not there.
            found = None
            while found is None and time.time() < deadline:
                time.sleep(0.03)
                st, inbox = send(self.n, "look", "GET", path + "?limit=10000", uid=tuid, run=rid)
                if st == 200:
                    found = any((e.get("payload") or {}).get("uid") == tuid for e in inbox)
            if found:
                break
        run[3] = j + 1
        if run[3] > 2:
            self.waiting.pop(0)

    def go(self):
        while not os.path.exists(STOP):
            if self.waiting and self.rng.random() < 0.5:
                self.tick()
            else:
                self.start()
            time.sleep(self.rng.uniform(0.02, 0.06))
        while self.waiting:
            self.tick()


threads = [threading.Thread(target=Client(n).go) for n in range(1, CLIENTS + 1)]
for t in threads:
    t.start()
for t in threads:
    t.join()
log_file.close()
