#!/usr/bin/env python3
"""A loopback stand-in for github.com's archive downloads, for airlockd's /import specs.

    archive_server.py ROOT PORT_FILE

GET /<owner>/<repo>/archive/<ref>.tar.gz answers with a tar.gz built from the directory
ROOT/<owner>/<repo>, everything under one top-level folder "<repo>-<ref>" like GitHub's
archives; 404 when that directory does not exist. A few owners behave specially (the repo
and ref are then free):

  status500      500 with a small text body
  redirect-evil  302 to http://evil.example.com/archive.tar.gz (a host airlockd refuses)
  redirect-self  302 to /acme/<repo>/archive/<ref>.tar.gz on this server
  bytes          200 with N pseudo-random bytes where the repo is "n<N>" (Content-Length set)
  chunked        the same without a Content-Length (chunked transfer encoding)
  stall          the first N bytes of "chunked", then nothing more for 60 s (a stalling archive)
  corrupt        200 with bytes that are not a gzip archive
  slow           waits 3 s, then answers as "acme"

Requests are counted per path: GET /_count?path=<path> → {"count": n}. The chosen port is
written to PORT_FILE (through a temporary file, so a reader never sees half a number).
"""
import io
import json
import os
import random
import sys
import tarfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
COUNTS = {}
LOCK = threading.Lock()


def build_archive(src, top):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src, arcname=top, recursive=True)
    return buf.getvalue()


def noise(n):
    rnd = random.Random(n)
    return rnd.randbytes(n)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # keep the spec output quiet
        pass

    def send(self, status, body, ctype="application/octet-stream", headers=None, length=True):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), 65536):
            part = body[i:i + 65536]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/_count":
            want = urllib.parse.parse_qs(url.query).get("path", [""])[0]
            with LOCK:
                n = COUNTS.get(want, 0)
            self.send(200, json.dumps({"count": n}).encode(), "application/json")
            return
        with LOCK:
            COUNTS[url.path] = COUNTS.get(url.path, 0) + 1
        parts = url.path.split("/")
        # ["", owner, repo, "archive", ref..., ] with the last piece ending in .tar.gz
        if len(parts) < 5 or parts[3] != "archive" or not url.path.endswith(".tar.gz"):
            self.send(404, b"Not Found", "text/plain")
            return
        owner, repo = parts[1], parts[2]
        ref = "/".join(parts[4:])[: -len(".tar.gz")]
        if owner == "status500":
            self.send(500, b"boom", "text/plain")
        elif owner == "redirect-evil":
            self.send(302, b"", headers={"Location": "http://evil.example.com/archive.tar.gz"})
        elif owner == "redirect-self":
            self.send(302, b"", headers={"Location": "/acme/%s/archive/%s.tar.gz" % (repo, ref)})
        elif owner in ("bytes", "chunked"):
            n = int(repo[1:]) if repo[1:].isdigit() else 1000
            self.send(200, noise(n), length=owner == "bytes")
        elif owner == "stall":
            n = int(repo[1:]) if repo[1:].isdigit() else 1000
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            body = noise(n)
            for i in range(0, n, 65536):
                part = body[i:i + 65536]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
            time.sleep(60)
        elif owner == "corrupt":
            self.send(200, b"this is not a gzip archive\n" * 10)
        else:
            if owner == "slow":
                time.sleep(3)
                owner = "acme"
            src = os.path.join(ROOT, owner, repo)
            if not os.path.isdir(src):
                self.send(404, b"Not Found", "text/plain")
                return
            top = "%s-%s" % (repo, ref.replace("/", "-"))
            self.send(200, build_archive(src, top), "application/x-gzip")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, sys.argv[2])
    server.serve_forever()


if __name__ == "__main__":
    main()
