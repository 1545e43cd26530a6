"""One daemon thread with a ledger connection of its own, doing what the driver's tick hands it, off the tick: the
shape ``Publisher`` (driver/publisher.py) and ``Reconciler`` (driver/reconciler.py) share. An offer wakes it; a
round the ledger (or the journal) does not answer is said and tried again every ``retry_seconds``; ``flush`` waits
until nothing offered is left; ``close`` finishes what is at hand (waiting at most its timeout), then stops.
"""

from __future__ import annotations

import logging
import threading

from fellows_fsm.errors import FellowsError
from fellows_fsm.ledger.store import Ledger

__all__ = ["LedgerThread"]

log = logging.getLogger(__name__)


class LedgerThread:
    """The thread; a subclass says what a round does (``_round``), whether anything is left (``_left``, asked
    under ``_lock``), which errors are retried and in what words."""

    thread_name = "ledger-thread"
    retried: tuple[type[FellowsError], ...] = (FellowsError,)
    failed_words = "the shared ledger did not answer this driver"

    def __init__(self, ledger: Ledger, *, retry_seconds: float) -> None:
        self._ledger = ledger
        self._retry = retry_seconds
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self.failures = 0
        """How many rounds the ledger did not answer (each tried again): what a test reads."""

    def _round(self) -> None:
        """One round of the work offered (raises one of ``retried`` when the ledger does not answer)."""
        raise NotImplementedError

    def _left(self) -> bool:
        """Is work offered and not done yet? (Asked under ``_lock``.)"""
        raise NotImplementedError

    def _offered(self) -> None:
        """Work was put in place under ``_lock`` by the caller: wake the thread (start it the first time)."""
        self._idle.clear()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        self._wake.set()

    @property
    def busy(self) -> bool:
        """Is work waiting or being done?"""
        return not self._idle.is_set()

    def flush(self, timeout: float) -> bool:
        """Wait until everything offered is done (True), or ``timeout`` seconds (False)."""
        return self._idle.wait(timeout)

    def close(self, timeout: float) -> None:
        """Finish the work at hand (waiting at most ``timeout`` seconds), then stop the thread."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._ledger.close()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                self._round()
            except self.retried as exc:
                self.failures += 1
                log.warning("%s (tried again in %g s): %s", self.failed_words, self._retry, exc)
                if self._stopping.wait(self._retry):
                    break
                self._wake.set()
                continue
            with self._lock:
                if self._left():
                    self._wake.set()
                else:
                    self._idle.set()
            if self._stopping.is_set():
                break
        self._ledger.close()
