#!/usr/bin/env python3
"""A misbehaving HTTP server on loopback for the SDK's failure-path specs: what airlockd
cannot be made to do (429/503 storms, resets, stalls, garbage, odd error bodies).

The behaviour is chosen by the request's X-API-Key (so a spec picks it with api_key=...):

  ok               answer every request (201 for POST /v1/sessions, else 200) with an echo
  429:N:RA         the first N requests of this key get 429 (Retry-After RA, or none if
                   RA is "none"), then as "ok"
  503:N            the first N get 503 with the capacity message, then as "ok"
  reset:N[:tag]    the first N requests: the connection is closed without an answer (a tag
                   makes another key with its own count)
  stall            never answers (until the client closes the connection, at most 30 s)
  delay:MS         answers as for any other key, MS milliseconds late
  truncated        200 with Content-Length larger than the body sent, then closes
  garbage          answers with bytes that are not HTTP, then closes
  text500          500 text/plain "Internal Server Error"
  422list          422 with a FastAPI validation list as detail
  nodetail:S       status S with a JSON body without detail ({})
  status:S         status S with {"detail": "status S"}
  missing          as "ok", but GET .../read answers the missing-file text for the path
  fulltext:N[:tag] the first N POSTs to .../exec get airlockd's "too many commands" 429 as
                   older servers send it: the text "... 2 allowed ..." only, no header
  fullheader:N[:tag] the same refusal said by the header X-Airlock-Exec-Limit: 2, with a
                   detail in other words
  big:B[:tag]      answers 200 with a JSON body of B bytes (Content-Length); bigchunked:B
                   the same in chunks of 64 KiB
  cutstream        200 NDJSON stream (chunked) of one stdout event, then the connection
                   closes without the final event (a streamed exec whose connection drops)
  delfail:N:S[:t]  as "ok", but the first N DELETE requests of this key get status S (429
                   with Retry-After 1, or 503); the session stays until a DELETE succeeds
  slowcreate:T[:t] as "ok", but POST /v1/sessions answers after T seconds (the session is
                   made at once: a client that leaves meanwhile has one it never heard of)

Control routes (no key needed): GET /_count?key=K → {"count": n, "connections": c,
"open": o, "sessions": s, "deletes": d} for that key (o: connections still open whose last request used
K; s: sessions created by POST /v1/sessions and not yet deleted; d: DELETEs counted by
delfail); GET /_last?key=K → the last
request of that key (method, path, query, headers, body).
The port is written to the file given as argv[1].
"""
import json
import select
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
COUNTS = {}
DELETES = {}
LAST = {}
CONNECTIONS = {}
OPEN = {}
SESSIONS = {}
NEXT_ID = [0]


def bump(key):
    with LOCK:
        COUNTS[key] = COUNTS.get(key, 0) + 1
        return COUNTS[key]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.seen_keys = set()
        self.open_key = None

    def finish(self):
        try:
            super().finish()
        finally:
            self.set_open_key(None)

    def set_open_key(self, key):
        with LOCK:
            if self.open_key is not None:
                OPEN[self.open_key] = OPEN.get(self.open_key, 0) - 1
            self.open_key = key
            if key is not None:
                OPEN[key] = OPEN.get(key, 0) + 1

    def wait_for_client_close(self, limit):
        """Stall: keep the connection open, answering nothing, until the client hangs up."""
        end = time.time() + limit
        while time.time() < end:
            ready, _, _ = select.select([self.connection], [], [], 0.1)
            if ready:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        break
                except OSError:
                    break

    def log_message(self, *args):
        pass

    def send_json(self, status, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode("utf-8", "replace") if n else ""

    def control(self, url):
        q = urllib.parse.parse_qs(url.query)
        key = q.get("key", [""])[0]
        with LOCK:
            if url.path == "/_count":
                return self.send_json(200, {"count": COUNTS.get(key, 0),
                                            "connections": CONNECTIONS.get(key, 0),
                                            "open": OPEN.get(key, 0),
                                            "sessions": len(SESSIONS.get(key, ())),
                                            "deletes": DELETES.get(key, 0)})
            if url.path == "/_last":
                return self.send_json(200, LAST.get(key) or {})
        return self.send_json(404, {"detail": "Not Found"})

    def handle_any(self):
        url = urllib.parse.urlsplit(self.path)
        body = self.read_body()
        if url.path.startswith("/_"):
            return self.control(url)
        key = self.headers.get("X-API-Key", "")
        if key not in self.seen_keys:
            self.seen_keys.add(key)
            with LOCK:
                CONNECTIONS[key] = CONNECTIONS.get(key, 0) + 1
        n = bump(key)
        self.set_open_key(key)
        with LOCK:
            LAST[key] = {"method": self.command, "path": url.path, "query": url.query,
                         "headers": {k.lower(): v for k, v in self.headers.items()},
                         "body": body}
        mode, _, arg = key.partition(":")
        if mode == "429":
            count, _, ra = arg.partition(":")
            if n <= int(count):
                headers = {} if ra == "none" else {"Retry-After": ra}
                return self.send_json(429, {"detail": "Rate limit of 2 requests per minute exceeded; retry in %s s." % ra}, headers)
        elif mode == "503":
            if n <= int(arg):
                return self.send_json(503, {"detail": "All sandbox workspaces are in use; try again shortly."})
        elif mode == "reset":
            if n <= int(arg.partition(":")[0]):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
        elif mode == "delay":
            time.sleep(int(arg) / 1000.0)
        elif mode == "stall":
            self.wait_for_client_close(30)
            self.close_connection = True
            return
        elif mode == "truncated":
            data = b'{"session_id": "sbx_0123'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self.close_connection = True
            return
        elif mode in ("fulltext", "fullheader") and self.command == "POST" and url.path.endswith("/exec"):
            if n <= int(arg.partition(":")[0]):
                if mode == "fulltext":
                    return self.send_json(429, {"detail": "Too many commands running at once: 2 allowed. "
                                                          "Wait for one to finish."})
                return self.send_json(429, {"detail": "The sandbox runs enough commands already."},
                                      {"X-Airlock-Exec-Limit": "2"})
        elif mode in ("big", "bigchunked"):
            size = int(arg.partition(":")[0])
            data = b'{"pad":"' + b"x" * max(0, size - 10) + b'"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if mode == "big":
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 65536):
                piece = data[i:i + 65536]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        elif mode == "cutstream":
            line = b'{"type":"stdout","data":"partial\\n"}\n'
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        elif mode == "garbage":
            self.wfile.write(b"THIS IS NOT HTTP\r\n\r\n")
            self.close_connection = True
            return
        elif mode == "text500":
            data = b"Internal Server Error"
            self.send_response(500)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        elif mode == "422list":
            return self.send_json(422, {"detail": [{"type": "less_than_equal",
                                                    "loc": ["body", "timeout_seconds"],
                                                    "msg": "Input should be less than or equal to 60",
                                                    "input": 600, "ctx": {"le": 60}}]})
        elif mode == "nodetail":
            return self.send_json(int(arg), {})
        elif mode == "status":
            return self.send_json(int(arg), {"detail": "status " + arg})
        elif mode == "delfail" and self.command == "DELETE":
            count, _, rest = arg.partition(":")
            status = int(rest.partition(":")[0])
            with LOCK:
                DELETES[key] = DELETES.get(key, 0) + 1
                failing = DELETES[key] <= int(count)
            if failing:
                return self.send_json(status, {"detail": "status %d" % status},
                                      {"Retry-After": "1"} if status == 429 else None)
        elif mode == "missing" and url.path.endswith("/read"):
            path = urllib.parse.parse_qs(url.query).get("path", [""])[0]
            return self.send_json(200, {"path": path, "content": "Error: File '%s' does not exist." % path})
        # "ok"
        if self.command == "POST" and url.path == "/v1/sessions":
            with LOCK:
                NEXT_ID[0] += 1
                sid = "sbx_%012x" % NEXT_ID[0]
                SESSIONS.setdefault(key, set()).add(sid)
            if mode == "slowcreate":
                time.sleep(float(arg.partition(":")[0]))
            return self.send_json(201, {"session_id": sid, "tenant_id": "bad",
                                        "egress": [], "disk_quota_mb": 512,
                                        "created_at": time.time(), "status": "ready"})
        if self.command == "POST" and url.path.endswith("/exec"):
            req = json.loads(body or "{}")
            return self.send_json(200, {"command": req.get("command"),
                                        "output": "[STDOUT]:\nran %s\n[EXIT CODE]: 0" % req.get("command"),
                                        "echo": {"query": url.query, "body": body}})
        if self.command == "DELETE" and url.path.startswith("/v1/sessions/"):
            with LOCK:
                SESSIONS.get(key, set()).discard(url.path.rsplit("/", 1)[1])
        return self.send_json(200, {"method": self.command, "path": url.path, "query": url.query,
                                    "body": body, "content": "echo",
                                    "headers": {k.lower(): v for k, v in self.headers.items()}})

    do_GET = do_POST = do_DELETE = do_PUT = handle_any


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()
