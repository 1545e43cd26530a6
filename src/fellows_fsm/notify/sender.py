"""The sender: one thread of the driver per sink, off the tick, that sends the outbox's events at least once, in
order per dispatch, with back-off, and records what became of each (journal/outbox.py: deliveries).

A delivered event is never sent again; one that failed for a reason that may pass (a timeout, a connection error,
408, 429, 5xx, a command's non-zero exit) is tried again after a growing pause, its dispatch's later events waiting
behind it, until ``[notify] give_up_after_seconds`` from its first attempt: then it is undeliverable (said in the
driver log and ``driver status``); any other answer (a 4xx) is a permanent failure, recorded at once. A driver
that dies between journaling an event and sending it sends it after its restart, with the same id and body.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from fellows_fsm.config.notify import SinkConfig
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.outbox import DELIVERED, FAILED, PENDING, UNDELIVERABLE, Delivery, OutboxEvent
from fellows_fsm.journal.store import Journal
from fellows_fsm.notify.envelope import body
from fellows_fsm.notify.sinks import Answer, SinkClient

__all__ = ["MAX_BACKOFF_SECONDS", "SinkSender", "backoff"]

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 60.0
"""The longest pause between two attempts at one event (1 s, 2 s, 4 s, ... up to this)."""
IDLE_SECONDS = 0.5
"""How long a sender with nothing due sleeps unless woken (a poll that journaled events wakes it)."""


def backoff(attempts: int) -> float:
    """The pause after ``attempts`` failed attempts: 1 s, doubled each time, at most MAX_BACKOFF_SECONDS."""
    return float(min(2.0 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


class SinkSender:
    """Sends one sink's events from the journal; ``run_once`` is one pass (the thread loops it)."""

    def __init__(
        self,
        sink: SinkConfig,
        journal: Journal,
        *,
        give_up_after_seconds: float,
        now: Callable[[], float] = time.time,
        hidden: frozenset[str] = frozenset(),
    ) -> None:
        self.sink = sink
        self.journal = journal
        self.give_up = give_up_after_seconds
        self.now = now
        self.client = SinkClient(sink, hidden=hidden)
        self.wake = threading.Event()
        self.stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.after = 0
        """Every event up to this seq is final for this sink (or not one it asks for): the next reads start past it
        (a long journal's delivered events are never read again)."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"notify-{self.sink.name}", daemon=True)
        self._thread.start()

    def close(self, wait: float) -> None:
        self.stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(wait)
        self.client.close()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.run_once()
            except FellowsError as exc:  # the journal is busy or full: the next pass tries again
                log.warning("notify %s: %s", self.sink.name, exc)
            except Exception:
                log.exception("notify %s: the sender failed; it tries again", self.sink.name)
            self.wake.wait(IDLE_SECONDS)
            self.wake.clear()

    def run_once(self) -> int:
        """Send what is due now (each dispatch's events in order); returns how many attempts were made."""
        blocked: set[str] = set()
        attempts = 0
        last = self.journal.last_event()  # read first: an event journaled after it has a higher seq
        due = self.journal.unsent(self.sink.name, self.sink.events, after=self.after)
        self.after = max(self.after, due[0].seq - 1 if due else last)
        for event in due:
            if self.stop.is_set():
                break
            if event.dispatch_id in blocked:
                continue
            before = self.journal.delivery(event.seq, self.sink.name)
            now = self.now()
            if before is not None and before.next_at is not None and before.next_at > now:
                blocked.add(event.dispatch_id)  # its later events wait behind it
                continue
            answer = self._send(event)
            attempts += 1
            status = self._record(event, answer, before)
            if status == PENDING:
                blocked.add(event.dispatch_id)
        return attempts

    def pending(self) -> bool:
        """Is an event still to be sent (now or after its back-off)?"""
        return bool(self.journal.unsent(self.sink.name, self.sink.events, limit=1, after=self.after))

    def _send(self, event: OutboxEvent) -> Answer:
        kept = event.body if event.body is not None else self.journal.fix_body(event.seq, body(self.journal, event))
        return self.client.send(event.event, event.event_id, event.dispatch_id, kept)

    def _record(self, event: OutboxEvent, answer: Answer, before: Delivery | None) -> str:
        now = self.now()
        first_at = before.first_at if before is not None else None
        attempts = (before.attempts if before is not None else 0) + 1
        next_at: float | None = None
        if answer.ok:
            status = DELIVERED
        elif not answer.retry:
            status = FAILED
            log.warning(
                "notify %s: event %s (%s of %s) refused for good: %s",
                self.sink.name,
                event.event_id,
                event.event,
                event.dispatch_id or "-",
                answer.said,
            )
        elif now - (first_at if first_at is not None else now) >= self.give_up:
            status = UNDELIVERABLE
            log.error(
                "notify %s: event %s (%s of %s) is undeliverable after %d attempts over %g s: %s",
                self.sink.name,
                event.event_id,
                event.event,
                event.dispatch_id or "-",
                attempts,
                self.give_up,
                answer.said,
            )
        else:
            status, next_at = PENDING, now + backoff(attempts)
        self.journal.put_delivery(event.seq, self.sink.name, status=status, at=now, next_at=next_at, answer=answer.said)
        return status
