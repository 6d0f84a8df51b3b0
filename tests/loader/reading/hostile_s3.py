"""A hostile S3 endpoint for the storage tests (a test double: a real store cannot be made to
misbehave on demand). Run as a process: `python hostile_s3.py`; it prints its port, then answers
pyarrow's S3 client over real HTTP. The object key picks the misbehaviour:

- `ok-<n>`: n bytes, right length.
- `wrong-length-<n>`: HEAD says n bytes; every GET (ranges ignored) answers 200 with n // 2 bytes.
- `too-long-<n>`: HEAD says n bytes; GET answers 200 with 64 n bytes.
- `cut-<n>`: GET promises n bytes and closes the connection after n // 2.
- `forbidden-<n>`: 403 AccessDenied.
- `flaky-<n>`: the first two GETs answer 503 SlowDown, then the object.
- `garbage-<n>`: n random bytes (right length, not Parquet).
"""

from __future__ import annotations

import http.server
import random
import re
import sys

_GETS: dict[str, int] = {}
_KEY = re.compile(r"^/[^/]+/(?:.*/)?(?P<mode>[a-z-]+?)-(?P<n>\d+)\.parquet$")


def _body(n: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(n)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _error(self, status: int, code: str) -> None:
        body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _head(self, length: int) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(length))
        self.send_header("Last-Modified", "Fri, 27 Nov 2026 12:00:00 GMT")
        self.send_header("ETag", '"x"')
        self.end_headers()

    def do_HEAD(self) -> None:
        m = _KEY.match(self.path.split("?")[0])
        if m is None:
            return self._error(404, "NoSuchKey")
        if m["mode"] == "forbidden":
            return self._error(403, "AccessDenied")
        self._head(int(m["n"]))

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        m = _KEY.match(path)
        if m is None:
            return self._error(404, "NoSuchKey")
        mode, n = m["mode"], int(m["n"])
        _GETS[path] = _GETS.get(path, 0) + 1
        if mode == "forbidden":
            return self._error(403, "AccessDenied")
        if mode == "flaky" and _GETS[path] <= 2:
            return self._error(503, "SlowDown")
        body = _body(n)
        if mode == "wrong-length":
            body = body[: n // 2]
        elif mode == "too-long":
            body = body * 64
        if mode == "cut":
            self._head(n)
            self.wfile.write(body[: n // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._head(len(body))
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that give up mid-body (the point of some modes) are not news


if __name__ == "__main__":
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()
