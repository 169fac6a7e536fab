#!/usr/bin/env python3
"""Runs inside an airlockd sandbox (the specs write it into the workspace): connection attempts
through the egress proxy and around it, as asked by a JSON list of steps (argv[1], or the file
named after an @), one JSON result per step on stdout. The proxy and the sandbox's own pass come from HTTPS_PROXY.

Steps ({"op": ...}):
  connect  target "host:port", auth "own" | "none" | "user:pass" | raw "header" text,
           line (a whole request line instead of CONNECT target) -> {"status": int|None}
  http     url: a plain-HTTP GET through the proxy -> {"status"}
  tcp      host, port: a direct connection, no proxy -> {"result": errno name|"connected", "fast"}
  udp      host, port: a datagram, then 1 s for an answer -> {"send", "recv"}
  resolve  name: the sandbox's own resolver -> {"result"}
  many     target, n, hold, marker: n tunnels at once; those that open are kept busy (a byte
           every 0.5 s) for `hold` seconds, `marker` is written once all have answered
           -> {"statuses": {status: count}}
  idle     target, wait: opens a tunnel, sends nothing -> {"status", "closed_after": s|None}
  raw      cases: [[base64 bytes, half_close]], concurrently, 15 s for all answers; "@OWN@"
           in a case becomes base64 of the sandbox's own id:pass
           -> {"statuses": [status|None, ...]}
  stall    target, n, heads, hold, marker: n tunnels and `heads` unfinished request heads
           held `hold` seconds -> {"opened", "heads_open"}
"""
import base64
import errno
import json
import os
import selectors
import socket
import sys
import time
import urllib.parse

URL = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY", "http://none:none@10.0.2.0:3128"))
PROXY = (URL.hostname, URL.port or 3128)
OWN = f"{urllib.parse.unquote(URL.username or '')}:{urllib.parse.unquote(URL.password or '')}"


def auth_header(auth):
    if auth == "none":
        return ""
    creds = OWN if auth == "own" else auth
    return "Proxy-Authorization: Basic " + base64.b64encode(creds.encode()).decode() + "\r\n"


def status_of(head):
    try:
        return int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def read_head(s, timeout=15):
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data


def request(target, auth="own", line=None, header=None):
    s = socket.create_connection(PROXY, timeout=10)
    first = line if line is not None else f"CONNECT {target} HTTP/1.1"
    extra = header if header is not None else auth_header(auth)
    s.sendall(f"{first}\r\nHost: {target}\r\n{extra}\r\n".encode())
    return s, status_of(read_head(s))


def op_connect(step):
    s, status = request(step.get("target", ""), step.get("auth", "own"), step.get("line"), step.get("header"))
    s.close()
    return {"status": status}


def op_http(step):
    s = socket.create_connection(PROXY, timeout=10)
    host = urllib.parse.urlsplit(step["url"]).hostname
    s.sendall(f"GET {step['url']} HTTP/1.1\r\nHost: {host}\r\n{auth_header('own')}\r\n".encode())
    status = status_of(read_head(s))
    s.close()
    return {"status": status}


def op_tcp(step):
    t = time.time()
    try:
        s = socket.create_connection((step["host"], step["port"]), timeout=5)
        s.close()
        result = "connected"
    except socket.timeout:
        result = "timeout"
    except OSError as e:
        result = errno.errorcode.get(e.errno, str(e.errno))
    return {"result": result, "fast": time.time() - t < 1}


def op_udp(step):
    family = socket.AF_INET6 if ":" in step["host"] else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    out = {}
    try:
        s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01",
                 (step["host"], step["port"]))
        out["send"] = "sent"
    except OSError as e:
        out["send"] = errno.errorcode.get(e.errno, str(e.errno))
    s.settimeout(1)
    try:
        s.recvfrom(512)
        out["recv"] = "answer"
    except socket.timeout:
        out["recv"] = "timeout"
    except OSError as e:
        out["recv"] = errno.errorcode.get(e.errno, str(e.errno))
    return out


def op_resolve(step):
    try:
        socket.getaddrinfo(step["name"], 443)
        return {"result": "resolved"}
    except socket.gaierror as e:
        return {"result": f"gaierror {e.errno}"}


def connect_many(target, n):
    """n CONNECTs at once; returns [(socket, status)]."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(PROXY)
        socks.append(s)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_WRITE)
    req = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth_header('own')}\r\n".encode()
    heads = {s: b"" for s in socks}
    status = {}
    deadline = time.time() + 30
    while len(status) < n and time.time() < deadline:
        for key, ev in sel.select(timeout=1):
            s = key.fileobj
            if ev & selectors.EVENT_WRITE:
                try:
                    s.send(req)
                except OSError:
                    status[s] = None
                    sel.unregister(s)
                    continue
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                chunk = s.recv(4096)
            except OSError:
                chunk = b""
            heads[s] += chunk
            if not chunk or b"\r\n\r\n" in heads[s]:
                status[s] = status_of(heads[s])
                sel.unregister(s)
    sel.close()
    return [(s, status.get(s)) for s in socks]


def count(results):
    out = {}
    for _, st in results:
        out[str(st)] = out.get(str(st), 0) + 1
    return out


def op_many(step):
    results = connect_many(step["target"], step["n"])
    if step.get("marker"):
        open(step["marker"], "w").close()
    end = time.time() + step.get("hold", 0)
    while time.time() < end:
        for s, st in results:
            if st == 200:
                try:
                    s.send(b".")
                except OSError:
                    pass
        time.sleep(0.5)
    for s, _ in results:
        s.close()
    return {"statuses": count(results)}


def op_idle(step):
    s, status = request(step["target"])
    closed = None
    if status == 200:
        t = time.time()
        s.settimeout(step["wait"])
        try:
            if s.recv(1) == b"":
                closed = round(time.time() - t, 1)
        except socket.timeout:
            pass
        except OSError:
            closed = round(time.time() - t, 1)
    s.close()
    return {"status": status, "closed_after": closed}


def op_raw(step):
    cases = step["cases"]
    socks = []
    own = base64.b64encode(OWN.encode())
    for data, half in cases:
        s = socket.create_connection(PROXY, timeout=10)
        try:
            s.sendall(base64.b64decode(data).replace(b"@OWN@", own))
            if half:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        socks.append(s)
    out = []
    deadline = time.time() + 15
    for s in socks:
        out.append(status_of(read_head(s, max(0.1, deadline - time.time()))))
        s.close()
    return {"statuses": out}


def op_stall(step):
    results = connect_many(step["target"], step["n"])
    heads = []
    for _ in range(step.get("heads", 0)):
        s = socket.create_connection(PROXY, timeout=10)
        s.sendall(b"CONNECT sink.test:443 HTTP/1.1\r\n")  # never finished
        heads.append(s)
    if step.get("marker"):
        open(step["marker"], "w").close()
    time.sleep(step.get("hold", 0))
    opened = sum(1 for _, st in results if st == 200)
    for s, _ in results:
        s.close()
    for s in heads:
        s.close()
    return {"opened": opened, "heads_open": len(heads)}


OPS = {"connect": op_connect, "http": op_http, "tcp": op_tcp, "udp": op_udp, "resolve": op_resolve,
       "many": op_many, "idle": op_idle, "raw": op_raw, "stall": op_stall}

ARG = sys.argv[1]
for step in json.loads(open(ARG[1:]).read() if ARG.startswith("@") else ARG):
    print(json.dumps(OPS[step["op"]](step)), flush=True)
