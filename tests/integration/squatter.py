# SPDX-License-Identifier: Apache-2.0
# squatter.py - an unprivileged local user's process that takes a TCP port on the host's
# loopback before kosa8 does (issue 34, finding 3): it answers every request as a model
# server would (200, an OpenAI-shaped completion; /health too) and logs what it was sent.
#
#   python3 squatter.py PORT LOG [WAIT_S]   listen on 127.0.0.1:PORT (trying to bind for up
#                                           to WAIT_S seconds), print "ready", serve
#
# Squatter(port) runs it as uid/gid 65534 (nobody) with setpriv; .pid, .records().
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

NOBODY = 65534


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    log = None

    def log_message(self, fmt, *args):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        with open(self.log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "body": body.decode(errors="replace")}) + "\n")
        data = json.dumps({"id": "x", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "SQUATTED"},
             "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = answer


class Squatter:
    def __init__(self, port, wait=0):
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="k8sq", dir="/tmp")
        os.chown(self.dir, NOBODY, NOBODY)      # its log, written as nobody
        self.log = os.path.join(self.dir, "requests.jsonl")
        open(self.log, "w").close()
        os.chown(self.log, NOBODY, NOBODY)
        self.proc = subprocess.Popen(
            ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
             sys.executable, os.path.abspath(__file__), str(port), self.log, str(wait)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid        # setpriv execs python: the same process
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise AssertionError("squatter did not take port %d: %r %s"
                                 % (port, line, self.proc.stderr.read()))

    def records(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    port, log, wait = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    assert os.getuid() == NOBODY, os.getuid()
    Handler.log = log
    end = time.time() + wait
    while True:
        try:
            srv = HTTPServer(("127.0.0.1", port), Handler)
            break
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.05)
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
