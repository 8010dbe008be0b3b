#!/usr/bin/env python3
"""The site a gateway asks about its clients, for loadtest/auth-storm.sh:
a JWK set provider ([auth] jwks_url) or a connect proxy
([auth] connect_proxy_url).

Usage:
  auth-site.py jwks JWK_FILE...   GET any path: {"keys": [the JWKs]}
  auth-site.py proxy DELAY_MS     POST any path: after DELAY_MS, 200
                                  {"user": U} where U is the `sid` of the
                                  client's query, 401 without one

Listens on 127.0.0.1 on a free port and prints "port N" once it serves.
On SIGTERM or SIGINT it stops and prints what it saw, one "name value"
per line: requests, and for the proxy max_in_flight, the most requests
it ever held at once. A request counts as in flight from the moment its
body is read until just before its answer is written, so the figure
never exceeds what the gateway had in flight (it may only be lower).
"""
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs


class Counts:
    """What the site saw, shared by the handler threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def enter(self):
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self):
        with self.lock:
            self.in_flight -= 1


class Handler(BaseHTTPRequestHandler):
    # Keep-alive: the gateway pools its connections to the site.
    protocol_version = "HTTP/1.1"
    counts = Counts()
    jwks = b""
    delay_secs = 0.0

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.counts.enter()
        self.counts.leave()
        self.answer(200, self.jwks)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = self.rfile.read(length)
        self.counts.enter()
        try:
            time.sleep(self.delay_secs)
            query = json.loads(request).get("query", "")
            sid = parse_qs(query).get("sid", [""])[0]
        except ValueError:
            sid = ""
        finally:
            self.counts.leave()
        if sid:
            self.answer(200, json.dumps({"user": sid}).encode())
        else:
            self.answer(401, b"{}")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # A reconnect storm opens many connections at once.
    request_queue_size = 1024


def main(argv):
    if len(argv) < 3 or argv[1] not in ("jwks", "proxy"):
        sys.exit(__doc__)
    if argv[1] == "jwks":
        keys = [json.load(open(path)) for path in argv[2:]]
        Handler.jwks = json.dumps({"keys": keys}).encode()
    else:
        Handler.delay_secs = float(argv[2]) / 1000
    server = Server(("127.0.0.1", 0), Handler)

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print("port", server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    server.server_close()
    counts = Handler.counts
    print("requests", counts.requests)
    if argv[1] == "proxy":
        print("max_in_flight", counts.max_in_flight)
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
