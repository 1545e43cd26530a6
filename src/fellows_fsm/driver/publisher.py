"""What a driver tells the shared ledger that decides nothing, written off its tick: each free job's end (GPU-hours,
in no budget) and its live dispatches (``status --team``). One daemon thread with a connection of its own; the tick
hands it what it read of its journal and never waits for the ledger (as notify/'s sender never holds a walk up).

Free ends are kept until written (a ledger down is retried every ``RETRY_SECONDS``; one already there is kept once,
by its key); of the live dispatches only the latest snapshot is written. ``close`` writes what is left, waiting at
most a few seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.errors import ConfigError, LedgerUnreachable
from fellows_fsm.ledger.store import Identity, Ledger

__all__ = ["FreeEnd", "LiveDispatch", "Publisher"]

log = logging.getLogger(__name__)

FreeEnd = tuple[str, str, str, int, float, str, float]
"""A free job's end: dispatch id, job id, lane, GPUs, GPU-hours, result, end (epoch seconds)."""
LiveDispatch = tuple[str, str, str, str, str, str | None, str]
"""A live dispatch: id, name, state, label, lane, QoS, outcome."""


class Publisher:
    """The thread that writes a driver's free ends and live dispatches to the ledger."""

    def __init__(self, config: LedgerConfig, who: Identity, *, retry_seconds: float) -> None:
        self._ledger = Ledger(config)
        self._who = who
        self._retry = retry_seconds
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._live: Sequence[LiveDispatch] | None = None
        self._free: list[FreeEnd] = []
        self._thread: threading.Thread | None = None
        self.failures = 0
        """How many writes the ledger did not take (each retried): what a test reads."""

    def offer(self, *, live: Sequence[LiveDispatch] | None = None, free: Sequence[FreeEnd] = ()) -> None:
        """Hand the thread a snapshot of the live dispatches and/or free ends to write; returns at once."""
        if live is None and not free:
            return
        with self._lock:
            if live is not None:
                self._live = live
            self._free.extend(free)
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ledger-publisher", daemon=True)
                self._thread.start()
        self._wake.set()

    def flush(self, timeout: float) -> bool:
        """Wait until everything offered is written (True), or ``timeout`` seconds (False)."""
        return self._idle.wait(timeout)

    def close(self, timeout: float) -> None:
        """Write what is left (waiting at most ``timeout`` seconds), then stop the thread."""
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
            with self._lock:
                live, free = self._live, list(self._free)
            try:
                if free:
                    self._ledger.add_free(self._who, free)
                    with self._lock:
                        del self._free[: len(free)]
                if live is not None:
                    self._ledger.publish_live(self._who, live)
                    with self._lock:
                        if self._live is live:
                            self._live = None
            except (LedgerUnreachable, ConfigError) as exc:
                self.failures += 1
                log.warning(
                    "the shared ledger did not take this driver's report (retried in %g s): %s", self._retry, exc
                )
                if self._stopping.wait(self._retry):
                    break
                self._wake.set()
                continue
            with self._lock:
                if self._live is None and not self._free:
                    self._idle.set()
                else:
                    self._wake.set()
            if self._stopping.is_set():
                break
        self._ledger.close()
