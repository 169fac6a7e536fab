#!/usr/bin/env python3
"""Offline stand-ins for the internet that airlockd's egress specs and bench need, all on
127.0.0.1 (nothing here ever talks to another address):

* a private CA and a server certificate for pypi.org, files.pythonhosted.org and
  registry.npmjs.org (made with the openssl command);
* one HTTPS server that plays those hosts by the Host header: a PEP 503 simple index and a
  small wheel it builds (airlock-egress-probe), an npm package document and its tarball, and
  /big/<MB> (that many MiB of zeros, for the throughput bench);
* a "sink": a TCP port that accepts connections, reads and discards, and never answers (the
  stalled upstream of the stall and cap specs);
* a DNS server (UDP) with a fixed table: names that resolve to loopback, the metadata
  address, private and IPv4-mapped addresses (the rebinding attacks), and NXDOMAIN for the
  rest. airlockd's SANDBOX_EGRESS_DNS points here, never at the machine's resolver.

usage: egress_upstream.py DIR   (writes DIR/info.json, then DIR/port with the HTTPS port)
"""
import base64
import hashlib
import http.server
import io
import ipaddress
import json
import os
import resource
import selectors
import socket
import ssl
import struct
import subprocess
import sys
import tarfile
import threading
import zipfile

HOSTS = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org"]
WHEEL_NAME, WHEEL_VERSION = "airlock_egress_probe", "0.1.0"
NPM_NAME, NPM_VERSION = "airlock-egress-probe", "1.0.0"

# name -> list of (type, address); anything else is NXDOMAIN
DNS_TABLE = {
    "loopback.test": [("A", "127.0.0.1")],
    "metadata.test": [("A", "169.254.169.254")],
    "private.test": [("A", "10.1.2.3")],
    "v6loopback.test": [("AAAA", "::1")],
    "mapped.test": [("AAAA", "::ffff:127.0.0.1")],
    "mixed.test": [("A", "203.0.113.9"), ("A", "127.0.0.1")],
    "cgnat.test": [("A", "100.64.0.1")],
}


def make_certs(d):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=airlock egress test CA",
        "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    with open(f"{d}/srv.ext", "w") as f:
        f.write("subjectAltName=" + ",".join("DNS:" + h for h in HOSTS) + "\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=pypi.org", "-keyout", f"{d}/srv.key",
        "-out", f"{d}/srv.csr")
    run("x509", "-req", "-in", f"{d}/srv.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{d}/srv.ext", "-out", f"{d}/srv.pem")


def make_packages(d):
    files = {
        f"{WHEEL_NAME}/__init__.py": b"VALUE = 'egress works'\n",
        f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: airlock-egress-probe\nVersion: {WHEEL_VERSION}\n".encode(),
        f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info/WHEEL":
            b"Wheel-Version: 1.0\nGenerator: airlock-spec\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info/RECORD,,\n"
    files[f"{WHEEL_NAME}-{WHEEL_VERSION}.dist-info/RECORD"] = record.encode()
    wheel = f"{WHEEL_NAME}-{WHEEL_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(f"{d}/{wheel}", "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    sha = hashlib.sha256(open(f"{d}/{wheel}", "rb").read()).hexdigest()
    index = (f'<!DOCTYPE html><html><body><a href="https://files.pythonhosted.org/packages/{wheel}'
             f'#sha256={sha}">{wheel}</a></body></html>\n').encode()

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        members = {
            "package/package.json": json.dumps({"name": NPM_NAME, "version": NPM_VERSION, "main": "index.js"}).encode(),
            "package/index.js": b"module.exports = 'npm egress works';\n",
        }
        for path, data in members.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    tgz = buf.getvalue()
    tgz_name = f"{NPM_NAME}-{NPM_VERSION}.tgz"
    doc = {"name": NPM_NAME, "dist-tags": {"latest": NPM_VERSION}, "versions": {NPM_VERSION: {
        "name": NPM_NAME, "version": NPM_VERSION, "main": "index.js",
        "dist": {"tarball": f"https://registry.npmjs.org/{NPM_NAME}/-/{tgz_name}",
                 "shasum": hashlib.sha1(tgz).hexdigest(),
                 "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
    return {
        ("pypi.org", f"/simple/{NPM_NAME}/"): (index, "text/html"),
        ("files.pythonhosted.org", f"/packages/{wheel}"): (open(f"{d}/{wheel}", "rb").read(),
                                                           "application/octet-stream"),
        ("registry.npmjs.org", f"/{NPM_NAME}"): (json.dumps(doc).encode(), "application/json"),
        ("registry.npmjs.org", f"/{NPM_NAME}/-/{tgz_name}"): (tgz, "application/octet-stream"),
    }, wheel


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    routes = {}
    counts = {}
    lock = threading.Lock()

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0].lower()
        path = self.path.split("?")[0]
        if path.startswith("/simple/") and not path.endswith("/"):
            path += "/"
        with self.lock:
            self.counts[host + path] = self.counts.get(host + path, 0) + 1
        if path == "/_count":
            return self.send(json.dumps(self.counts).encode(), "application/json")
        if path.startswith("/big/") and path[5:].isdigit():
            mb = int(path[5:])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(mb << 20))
            self.end_headers()
            chunk = b"\0" * (1 << 20)
            for _ in range(mb):
                self.wfile.write(chunk)
            return
        hit = self.routes.get((host, path))
        if hit:
            return self.send(*hit)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send(self, data, ctype):
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve_sink(sock):
    """Accepts and holds connections, discarding what they send; never writes."""
    sel = selectors.DefaultSelector()
    sock.setblocking(False)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if s is sock:
                try:
                    c, _ = sock.accept()
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                except OSError:
                    pass
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()


def serve_dns(sock):
    while True:
        query, addr = sock.recvfrom(512)
        try:
            tid, _flags, _qd = struct.unpack("!HHH", query[:6])
            i, labels = 12, []
            while query[i]:
                labels.append(query[i + 1:i + 1 + query[i]].decode("ascii", "replace"))
                i += 1 + query[i]
            qtype = struct.unpack("!H", query[i + 1:i + 3])[0]
            question = query[12:i + 5]
        except (IndexError, struct.error):
            continue
        name = ".".join(labels).lower()
        records = DNS_TABLE.get(name)
        answers = b""
        count = 0
        for rtype, value in records or []:
            if (rtype == "A" and qtype == 1) or (rtype == "AAAA" and qtype == 28):
                data = ipaddress.ip_address(value).packed
                answers += struct.pack("!HHHIH", 0xC00C, qtype, 1, 60, len(data)) + data
                count += 1
        rcode = 0 if records is not None else 3
        sock.sendto(struct.pack("!HHHHHH", tid, 0x8180 | rcode, 1, count, 0, 0) + question + answers, addr)


def main():
    d = sys.argv[1]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
    make_certs(d)
    routes, wheel = make_packages(d)
    Handler.routes = routes

    https = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    https.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(f"{d}/srv.pem", f"{d}/srv.key")
    https.socket = ctx.wrap_socket(https.socket, server_side=True)

    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(4096)
    closed = socket.socket()  # bound, never listening: connections to it are refused
    closed.bind(("127.0.0.1", 0))
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(("127.0.0.1", 0))

    threading.Thread(target=serve_sink, args=(sink,), daemon=True).start()
    threading.Thread(target=serve_dns, args=(dns,), daemon=True).start()
    info = {
        "https": https.server_address[1], "sink": sink.getsockname()[1], "closed": closed.getsockname()[1],
        "dns": dns.getsockname()[1], "ca": f"{d}/ca.pem", "wheel": wheel,
        "pip_package": "airlock-egress-probe", "npm_package": NPM_NAME,
    }
    with open(f"{d}/info.json.tmp", "w") as f:
        json.dump(info, f)
    os.rename(f"{d}/info.json.tmp", f"{d}/info.json")
    with open(f"{d}/port.tmp", "w") as f:
        f.write(str(info["https"]))
    os.rename(f"{d}/port.tmp", f"{d}/port")
    https.serve_forever()


main()
