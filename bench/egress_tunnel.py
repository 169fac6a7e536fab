#!/usr/bin/env python3
"""Helper of bench/egress.lua: times 100 MB HTTPS downloads with curl from the host, directly
from the loopback upstream, and through airlockd's egress proxy, alternating.

The proxy's listener of a running egress sandbox lives in that sandbox's private proxy-side
namespace. This borrows the listening socket from airlockd (pidfd_getfd), asks the kernel for
its namespace (SIOCGSKNS), enters it and runs curl there against 10.0.2.0:3128: the proxy is
then measured on the same path a sandbox uses, without gVisor's own network stack in the way.

usage: egress_tunnel.py AIRLOCKD_PID SESSION_ID PASS HTTPS_PORT CA_PEM MB ROUNDS
prints one line of JSON: {"direct": [MB/s...], "proxy": [MB/s...]}
"""
import ctypes
import json
import os
import socket
import subprocess
import sys

SYS_PIDFD_GETFD = 438
SIOCGSKNS = 0x894C
CLONE_NEWNET = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)


def borrow_listener(pid):
    """A duplicate of airlockd's socket listening on 10.0.2.0:3128 (the first one found)."""
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:
                continue
            fd = libc.syscall(SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                continue
            s = socket.socket(fileno=fd)
            try:
                listening = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                if listening and s.family == socket.AF_INET and s.getsockname() == ("10.0.2.0", 3128):
                    return s
            except OSError:
                pass
            s.close()
    finally:
        os.close(pidfd)
    raise SystemExit("no egress listener in airlockd (is an egress command running?)")


def curl(args):
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}", *args],
                         check=True, capture_output=True, text=True).stdout
    return float(out) / 1e6


def main():
    pid, sid, pw, port, ca, mb, rounds = sys.argv[1:8]
    url = f"https://pypi.org/big/{mb}"
    listener = borrow_listener(int(pid))
    netns = libc.ioctl(listener.fileno(), SIOCGSKNS)
    if netns < 0:
        raise SystemExit("SIOCGSKNS failed")
    root = os.open("/proc/self/ns/net", os.O_RDONLY)
    direct, proxied = [], []
    for _ in range(int(rounds)):
        direct.append(curl(["--cacert", ca, "--connect-to", f"pypi.org:443:127.0.0.1:{port}", url]))
        if libc.setns(netns, CLONE_NEWNET) != 0:
            raise SystemExit("setns failed")
        try:
            proxied.append(curl(["--cacert", ca, "-x", f"http://{sid}:{pw}@10.0.2.0:3128", url]))
        finally:
            libc.setns(root, CLONE_NEWNET)
    print(json.dumps({"direct": direct, "proxy": proxied}))


main()
