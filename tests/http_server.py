#!/usr/bin/env python3
"""http_server: a scripted HTTP/1.1 server on 127.0.0.1 for the specs of mend.http.

Usage: http_server.py SCRIPT LOG [CERT KEY]: with CERT and KEY (PEM files) it speaks HTTPS. It
listens on a free port and prints "PORT PID" on its first line of output. For each request it reads
SCRIPT (a JSON object, re-read at every request so that a spec can change it) and answers with the
entry of the request's path: a list of responses, the n-th request to the path getting the n-th one
and every later request the last. A response is {"status", "headers": {...} (a list as a value: the
header repeated), "body", "size": n (a body of n bytes of "x"), "delay": seconds before answering,
"interim": [codes] (1xx answers sent before it, each with no header), "wait_for": n (hold the answer until n requests are being answered at once, then answer them all;
"delay" is then the longest wait, after which every request held answers at once, as does every
later one until no request is left open), "gzip": true (the body sent gzip-compressed, with
Content-Encoding), "close_after": seconds after answering (kept alive as far as the client knows)
before the server closes the connection}; a path not in the script gets 404. A client that resets
its connection is said in one line on stderr; any other error of the server's is printed with its
traceback. Every request is appended to LOG as one JSON line: {"method", "path", "idempotency_key",
"accept_encoding", "content_type", "authorization", "user_agent" (a list: every User-Agent line),
"body", "client_port" (the same port twice: the client reused its connection), "in_flight"
(requests being answered when it arrived, itself included: how many a client had open at once)}.
It must never decide anything a spec asserts beyond what the script says.
"""
import gzip
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT, LOG = sys.argv[1], sys.argv[2]
counts = {}
in_flight = [0]
released = [False]  # the requests held by "wait_for" are answering; until none is left open
lock = threading.Lock()
opened = threading.Condition(lock)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body_in = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        path = self.path.split("?", 1)[0]
        with lock:
            n = counts.get(path, 0)
            counts[path] = n + 1
            in_flight[0] += 1
            opened.notify_all()
            with open(LOG, "a") as f:
                f.write(json.dumps({"method": self.command, "path": path,
                                    "idempotency_key": self.headers.get("Idempotency-Key"),
                                    "accept_encoding": self.headers.get("Accept-Encoding"),
                                    "content_type": self.headers.get("Content-Type"),
                                    "expect": self.headers.get("Expect"),
                                    "authorization": self.headers.get("Authorization"),
                                    "user_agent": self.headers.get_all("User-Agent") or [],
                                    "body": body_in,
                                    "client_port": self.client_address[1],
                                    "in_flight": in_flight[0]}) + "\n")
            try:
                with open(SCRIPT) as f:
                    script = json.load(f)
            except (OSError, ValueError):
                script = {}
        try:
            self.respond(script, path, n)
        finally:
            with lock:
                in_flight[0] -= 1
                if in_flight[0] == 0:
                    released[0] = False

    def respond(self, script, path, n):
        entries = script.get(path)
        if not entries:
            r = {"status": 404, "body": "no such path"}
        else:
            r = entries[min(n, len(entries) - 1)]
        if r.get("wait_for"):
            with opened:
                deadline = time.monotonic() + r.get("delay", 30)
                while not released[0]:
                    left = deadline - time.monotonic()
                    if in_flight[0] >= r["wait_for"] or left <= 0:
                        released[0] = True
                        opened.notify_all()
                        break
                    opened.wait(left)
        elif r.get("delay"):
            time.sleep(r["delay"])
        body = ("x" * r["size"]) if "size" in r else r.get("body", "")
        data = body.encode()
        if r.get("gzip"):
            data = gzip.compress(data)
        for code in r.get("interim") or []:   # 1xx answers sent before the final one
            self.wfile.write(b"HTTP/1.1 %d Interim\r\n\r\n" % code)
        self.send_response(r.get("status", 200))
        for k, v in (r.get("headers") or {}).items():
            for one in (v if isinstance(v, list) else [v]):   # a list: the header repeated
                self.send_header(k, one)
        if r.get("gzip"):
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
        if r.get("close_after"):
            self.wfile.flush()
            time.sleep(r["close_after"])
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = answer


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024   # the listen backlog: hundreds of clients connect at once

    def handle_error(self, request, client_address):
        # A client that resets its connection (a worker killed mid-request) ended the exchange:
        # its business, said in one line. Anything else is this server's own error, shown whole.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError,
                                          ConnectionAbortedError)):
            print("http_server: %s:%d reset its connection" % client_address[:2],
                  file=sys.stderr, flush=True)
            return
        super().handle_error(request, client_address)


def main():
    server = Server(("127.0.0.1", 0), Handler)
    if len(sys.argv) > 4:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[3], sys.argv[4])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], os.getpid(), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
