"""What a driver tells the shared ledger that decides nothing, written off its tick: each free job's end (GPU-hours,
in no budget) and its live dispatches (``status --team``). One daemon thread with a connection of its own; the tick
hands it what it read of its journal and never waits for the ledger (as notify/'s sender never holds a walk up).

Free ends are kept until written (a ledger down is retried every ``RETRY_SECONDS``; one already there is kept once,
by its key); of the live dispatches only the latest snapshot is written. ``close`` writes what is left, waiting at
most a few seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.driver.ledger_thread import LedgerThread
from fellows_fsm.errors import ConfigError, LedgerUnreachable
from fellows_fsm.ledger.store import Identity, Ledger

__all__ = ["FreeEnd", "LiveDispatch", "Publisher"]

FreeEnd = tuple[str, str, str, int, float, str, float]
"""A free job's end: dispatch id, job id, lane, GPUs, GPU-hours, result, end (epoch seconds)."""
LiveDispatch = tuple[str, str, str, str, str, str | None, str]
"""A live dispatch: id, name, state, label, lane, QoS, outcome."""


class Publisher(LedgerThread):
    """The thread that writes a driver's free ends and live dispatches to the ledger."""

    thread_name = "ledger-publisher"
    retried = (LedgerUnreachable, ConfigError)
    failed_words = "the shared ledger did not take this driver's report"

    def __init__(self, config: LedgerConfig, who: Identity, *, retry_seconds: float) -> None:
        super().__init__(Ledger(config), retry_seconds=retry_seconds)
        self._who = who
        self._live: Sequence[LiveDispatch] | None = None
        self._free: list[FreeEnd] = []

    def offer(self, *, live: Sequence[LiveDispatch] | None = None, free: Sequence[FreeEnd] = ()) -> None:
        """Hand the thread a snapshot of the live dispatches and/or free ends to write; returns at once."""
        if live is None and not free:
            return
        with self._lock:
            if live is not None:
                self._live = live
            self._free.extend(free)
            self._offered()

    def _round(self) -> None:
        with self._lock:
            live, free = self._live, list(self._free)
        if free:
            self._ledger.add_free(self._who, free)
            with self._lock:
                del self._free[: len(free)]
        if live is not None:
            self._ledger.publish_live(self._who, live)
            with self._lock:
                if self._live is live:
                    self._live = None

    def _left(self) -> bool:
        return self._live is not None or bool(self._free)
