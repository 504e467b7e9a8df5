#!/usr/bin/env python3
"""order_service: the simulated HTTP services of workflows/order_http.lua (inventory, payments,
shipping) on 127.0.0.1. An example's stand-in for real dependencies, not part of the engine.

  python3 workflows/order_service.py [--port N] [--busy N] [--flaky N] [--slow S]

prints "PORT PID" and serves:
  POST /inventory/reserve {items}   -> {"reservation": "res-N"}
  POST /inventory/release {reservation}
  POST /payments/charge {amount, card}   -> {"charge_id": "ch-N"}; card "declined": 402
  POST /payments/refund {charge_id}
  POST /shipping/ship {address}     -> {"tracking": "tr-N"}
  GET  /stats                       -> what each endpoint did: {"calls", "effects"}
--busy N: the first N charges answer 429 with Retry-After: 1 (no effect); --flaky N: the first
N shipments answer 503; --slow S: every answer waits S seconds. A request carrying an
Idempotency-Key seen before gets the first answer again and has no second effect: the dedupe
a retried or recovered step relies on. State lives in memory only.
"""
import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = None
lock = threading.Lock()
seen = {}                 # (path, key) -> (status, body)
calls, effects = {}, {}


def effect(path, req, n):
    if path == "/inventory/reserve":
        return 200, {"reservation": "res-%d" % n, "items": req.get("items")}
    if path == "/inventory/release":
        return 200, {"released": req.get("reservation")}
    if path == "/payments/charge":
        if req.get("card") == "declined":
            return 402, {"error": "card declined"}
        return 200, {"charge_id": "ch-%d" % n, "amount": req.get("amount")}
    if path == "/payments/refund":
        return 200, {"refunded": req.get("charge_id")}
    if path == "/shipping/ship":
        return 200, {"tracking": "tr-%d" % n}
    return 404, {"error": "no such endpoint"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        if args.slow:
            time.sleep(args.slow)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with lock:
            self.reply(200, {"calls": calls, "effects": effects})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self.reply(400, {"error": "body is not JSON"})
        path, key = self.path, self.headers.get("Idempotency-Key")
        with lock:
            calls[path] = calls.get(path, 0) + 1
            if path == "/payments/charge" and calls[path] <= args.busy:
                return self.reply(429, {"error": "busy"}, [("Retry-After", "1")])
            if path == "/shipping/ship" and calls[path] <= args.flaky:
                return self.reply(503, {"error": "shipping is down"})
            if key and (path, key) in seen:
                return self.reply(*seen[(path, key)])
            status, body = effect(path, req, effects.get(path, 0) + 1)
            if status == 200:
                effects[path] = effects.get(path, 0) + 1
            if key:
                seen[(path, key)] = (status, body)
        self.reply(status, body)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--busy", type=int, default=0)
    p.add_argument("--flaky", type=int, default=0)
    p.add_argument("--slow", type=float, default=0)
    args = p.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], os.getpid(), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
