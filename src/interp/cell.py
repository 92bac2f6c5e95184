# SPDX-License-Identifier: Apache-2.0
# cell.py - kosa8's cell client, run in a container for each cell (docs/interpreter.md).
#
# kosa8d runs `python3 -I -S -c <this> kosa8-ctx cell ID` with the request on stdin. It
# connects to the context's driver (driver.py) at /run/kosa8/ctx/ID.sock, says
# {"type":"connected"}, sends the request and copies the driver's event lines to stdout
# until the driver closes. Killing this process (a timeout, a client that left) closes
# the socket, which the driver takes as an interrupt of the cell. Exit codes: 0 done,
# 2 usage, 3 no such context, 4 the context's driver is not running.
import os
import socket
import sys


def out(b):
    while b:
        n = os.write(1, b)
        b = b[n:]


def main():
    d = os.environ.get("KOSA8_CTX_DIR") or "/run/kosa8/ctx"
    if len(sys.argv) != 4 or sys.argv[2] != "cell":
        os.write(2, b"usage: cell.py kosa8-ctx cell ID\n")
        return 2
    cid = sys.argv[3]
    if not (0 < len(cid) <= 64) or cid.strip("abcdefghijklmnopqrstuvwxyz0123456789-_"):
        os.write(2, b"bad context id\n")
        return 2
    req = sys.stdin.buffer.read()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(d + "/" + cid + ".sock")
    except FileNotFoundError:
        os.write(2, b"no such context\n")
        return 3
    except ConnectionRefusedError:
        os.write(2, b"the context's interpreter is not running\n")
        return 4
    out(b'{"type":"connected"}\n')
    s.sendall(req)
    while True:
        b = s.recv(65536)
        if not b:
            return 0
        out(b)


sys.exit(main())
