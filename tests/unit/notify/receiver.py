"""A real HTTP receiver on loopback for the notification tests: it checks each request's HMAC signature against
the exact body, keeps what it got, and answers what the test tells it (a status, a hang, a 500 once)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.define
class Got:
    """One request the receiver read."""

    path: str
    headers: dict[str, str]
    body: bytes
    signed: bool | None
    """The signature checked (None: no secret, nothing to check)."""
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """``with Receiver(secret=b"k") as r:`` serves on 127.0.0.1:<r.port> until the block ends."""

    def __init__(self, *, secret: bytes | None = None, port: int = 0) -> None:
        self.secret = secret
        self.got: list[Got] = []
        self.answers: list[int] = []
        """Statuses to answer in turn (then ``default``)."""
        self.default = 200
        self.hang_seconds = 0.0
        self.location = ""
        """A Location header to answer with (a redirect), or none."""
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                signed = None
                if receiver.secret is not None:
                    want = "sha256=" + hmac.new(receiver.secret, body, hashlib.sha256).hexdigest()
                    signed = hmac.compare_digest(want, self.headers.get("X-Fellows-Signature", ""))
                with receiver._lock:
                    receiver.got.append(Got(self.path, dict(self.headers.items()), body, signed, time.time()))
                    code = receiver.answers.pop(0) if receiver.answers else receiver.default
                if receiver.hang_seconds:
                    time.sleep(receiver.hang_seconds)
                try:
                    self.send_response(code)
                    self.send_header("Content-Length", "2")
                    if receiver.location and 300 <= code < 400:
                        self.send_header("Location", receiver.location)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the sender gave up waiting (a hanging receiver): nobody reads the answer
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/secret-path?token=t0ps3cret"

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self, where: Callable[[Got], bool] = lambda g: True) -> list[dict[str, Any]]:
        with self._lock:
            return [g.json for g in self.got if where(g)]


def free_port() -> int:
    """A loopback port nothing listens on now (for a receiver that is down, then up on the same port)."""
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
