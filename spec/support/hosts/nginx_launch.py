#!/usr/bin/env python3
"""Starts nginx on a loopback port that nothing else can take in between: binds and listens
on 127.0.0.1:0 here, writes `listen 127.0.0.1:<port>;` to DIR/listen.conf (which the
generated nginx.conf includes) and the port to DIR/port, then becomes nginx, which takes the
listening socket over through $NGINX (nginx's own socket inheritance, as in a binary
upgrade) instead of binding the port itself.

Usage: nginx_launch.py DIR NGINX_ARGUMENT...
"""
import os
import socket
import sys


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def main():
    directory, nginx_args = sys.argv[1], sys.argv[2:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(511)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    write_atomically(os.path.join(directory, "listen.conf"), "listen 127.0.0.1:%d;\n" % port)
    write_atomically(os.path.join(directory, "port"), "%d\n" % port)
    os.environ["NGINX"] = "%d;" % listener.fileno()
    os.execvp("nginx", ["nginx"] + nginx_args)


if __name__ == "__main__":
    main()
