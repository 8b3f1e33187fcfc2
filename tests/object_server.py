"""A plain HTTP object server for the tests of object-store inputs (tests/it/objects.rs).

Serves the files under --root on 127.0.0.1 with HEAD and ranged GET (RFC 9110: one
`bytes=a-b` range), and misbehaves on request, the first time each range is asked for,
by the first part of the URL path:

  /ok/NAME          serves NAME
  /fail500/NAME     answers 500 once per range, then serves
  /short/NAME       sends fewer bytes than the range asks (and says so in Content-Length)
                    (the directories of a Zarr store are served as keys: /ok/s.zarr/c/0/0)
  /drop/NAME        says the full length, sends half, and closes the connection
  /slow/NAME        waits --latency-ms before each answer (always)
  /forbidden/NAME   answers 403 (always)

GET /_stats answers {"requests": n, "bytes": n} (GETs of data since the start, and the
body bytes sent) and /_reset sets them to zero. The port is printed on the first line of
stdout; the server stops when stdin closes (the test that started it ended).
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATS = {"requests": 0, "bytes": 0}
SEEN = set()
LOCK = threading.Lock()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    args = ap.parse_args()
    root = os.path.realpath(args.root)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out in two writes: with Nagle's algorithm the body waits for
        # the client's delayed ACK, 40 ms a request
        disable_nagle_algorithm = True

        def log_message(self, *a):  # quiet
            pass

        def _file(self):
            parts = self.path.split("?", 1)[0].lstrip("/").split("/", 1)
            if len(parts) != 2:
                return None, None
            mode, name = parts
            full = os.path.realpath(os.path.join(root, name))
            if not full.startswith(root + os.sep) or not os.path.isfile(full):
                return mode, None
            return mode, full

        def _plain(self, code, body=b""):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self):
            self._serve(head=True)

        def do_GET(self):
            if self.path == "/_stats":
                with LOCK:
                    body = json.dumps(STATS).encode()
                return self._plain(200, body)
            if self.path == "/_reset":
                with LOCK:
                    STATS["requests"] = 0
                    STATS["bytes"] = 0
                    SEEN.clear()
                return self._plain(200)
            self._serve(head=False)

        def _serve(self, head):
            mode, full = self._file()
            if mode == "slow":
                time.sleep(args.latency_ms / 1000.0)
            if mode == "forbidden":
                return self._plain(403, b"forbidden")
            if full is None:
                return self._plain(404, b"no such object")
            size = os.path.getsize(full)
            start, end = 0, size  # [start, end)
            rng = self.headers.get("Range")
            partial = False
            if rng and not head:
                try:
                    unit, spec = rng.split("=", 1)
                    a, b = spec.split("-", 1)
                    assert unit.strip() == "bytes" and "," not in spec
                    if a == "":
                        start, end = max(0, size - int(b)), size
                    else:
                        start = int(a)
                        end = size if b == "" else min(size, int(b) + 1)
                    partial = True
                except Exception:
                    return self._plain(400, b"bad range")
                if start >= size or start >= end:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            # a range taken up where a dropped answer stopped (same end) is not dropped again
            key = (mode, full, end) if mode == "drop" else (mode, full, start, end)
            with LOCK:
                first = key not in SEEN
                SEEN.add(key)
                if not head:
                    STATS["requests"] += 1
            if not head and first and mode == "fail500":
                return self._plain(500, b"injected failure")
            n = end - start
            send = n
            # a whole object sent short with a Content-Length to match is only a smaller
            # object: the injected fault is a range answered short
            if not head and first and mode == "short" and partial and n > 1:
                send = n // 2
            self.send_response(206 if partial else 200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{int(os.path.getmtime(full) * 1e6)}-{size}"')
            self.send_header("Last-Modified", self.date_time_string(int(os.path.getmtime(full))))
            if partial:
                last = start + (send if mode == "short" and first else n) - 1
                self.send_header("Content-Range", f"bytes {start}-{last}/{size}")
            self.send_header("Content-Length", str(send))
            self.end_headers()
            if head:
                return
            with open(full, "rb") as f:
                f.seek(start)
                body = f.read(send)
            if first and mode == "drop" and n > 1:
                self.wfile.write(body[: n // 2])
                self.wfile.flush()
                self.close_connection = True
                with LOCK:
                    STATS["bytes"] += n // 2
                return
            self.wfile.write(body)
            with LOCK:
                STATS["bytes"] += len(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the test ends
    srv.shutdown()


if __name__ == "__main__":
    main()
