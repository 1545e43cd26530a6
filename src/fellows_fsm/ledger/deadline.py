"""A deadline on one call to the shared ledger, counted by this process (``Ledger._run``).

The server's own ``statement_timeout`` is counted by the server: one whose processes hang with their sockets open (a
stopped or stuck server) acknowledges every packet and never answers, so neither that timeout nor TCP's own ends
the wait. Past the deadline the connection's socket is shut down under the call: libpq's read ends, the call fails
as a lost connection (``LedgerUnreachable``) and the next one connects again. Standard library only.
"""

from __future__ import annotations

import os
import socket
import threading
from types import TracebackType

__all__ = ["Deadline"]


class Deadline:
    """``with Deadline(fileno, seconds):`` one call on the socket ``fileno``, cut after ``seconds``."""

    def __init__(self, fileno: int, seconds: float) -> None:
        self._fileno = fileno
        self._lock = threading.Lock()
        self._done = False
        self.cut = False
        """Did the deadline pass, and the socket get shut down?"""
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()

    def _cut(self) -> None:
        with self._lock:
            if self._done:
                return
            self.cut = True
            try:
                with socket.socket(fileno=os.dup(self._fileno)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)  # the call's own descriptor sees it too: its read ends
            except OSError:
                pass  # closed already: the call has ended
