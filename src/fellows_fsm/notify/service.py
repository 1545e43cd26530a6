"""The driver's notifier: its sink senders (threads of their own, off the tick), the ``[metrics]`` textfile and
``/metrics`` address, and the budget thresholds told as events. The tick only wakes it (``on_tick``): no poll waits
for a receiver, a command or a scrape.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import start_http_server

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.core.events import Event
from fellows_fsm.errors import FellowsError
from fellows_fsm.journal.queries import read_spend
from fellows_fsm.journal.store import Journal
from fellows_fsm.notify.metrics import registry_of, remember_calls, write_textfile
from fellows_fsm.notify.sender import SinkSender

__all__ = ["THRESHOLDS", "Notifier"]

log = logging.getLogger(__name__)

THRESHOLDS = (80, 100)
"""The percentages of a [budget] window whose passing is told (``budget_threshold``), once per window."""
_PASSED = "notify.threshold."
_OUTAGE = "notify.outage."
OUTAGE_EVERY_SECONDS = 30.0
"""How often at most the watcher looks for a cluster that has not answered for longer than a rung's park cap."""
CALLS_EVERY_SECONDS = 30.0
"""How often at most the driver journals its SLURM call counts for ``fellows-fsm metrics`` (the endpoint and the
textfile read the same journal)."""


class Notifier:
    """What one driver runs to tell: started after the driver lock is taken, stopped before it is released."""

    def __init__(
        self,
        config: Config,
        journal: Journal,
        *,
        budget: Callable[[], BudgetConfig | None] | None = None,
        calls: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
    ) -> None:
        self.config = config
        self.journal = journal
        self._budget = budget or (lambda: config.budget)
        self._calls = calls
        self._last_calls: dict[str, dict[str, int]] | None = None
        self._calls_due = 0.0
        self._outages_due = 0.0
        secrets = frozenset(s.secret_env for s in config.notify.sinks if s.secret_env)
        self.senders = [
            SinkSender(sink, journal, give_up_after_seconds=config.notify.give_up_after_seconds, hidden=secrets)
            for sink in config.notify.sinks
        ]
        self._tick = threading.Event()
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self._server: Any = None

    def start(self) -> Notifier:
        """Start every sender and the metrics (a bad ``listen``: said in the log, the driver drives on)."""
        self.journal.mark_sinks([s.name for s in self.config.notify.sinks])
        for sender in self.senders:
            sender.start()
        listen = self.config.metrics.listen
        if listen is not None:
            try:
                self._server, _ = start_http_server(listen[1], listen[0], registry_of(self.journal, self._budget()))
                log.info("metrics served on http://%s:%d/metrics", *listen)
            except OSError as exc:
                log.error("[metrics] listen = %s:%d cannot be served: %s", listen[0], listen[1], exc)
        if self.config.metrics.textfile is not None or self._calls is not None or self._budget() is not None:
            self._watch = threading.Thread(target=self._watch_loop, name="notify-watch", daemon=True)
            self._watch.start()
        return self

    def on_tick(self, _report: object = None) -> None:
        """A poll ended: its events are journaled, the senders may look now; the watcher rewrites the metrics."""
        for sender in self.senders:
            sender.wake.set()
        self._tick.set()

    def busy(self) -> bool:
        """Is any event still to be sent (the driver stays until it is delivered, refused or given up on)?"""
        return any(sender.pending() for sender in self.senders)

    def stop(self) -> None:
        self._stop.set()
        self._tick.set()
        for sender in self.senders:
            sender.close(sender.sink.timeout_seconds + 2)
        if self._watch is not None:
            self._watch.join(10)
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.shutdown()
                self._server.server_close()

    # ------------------------------------------------------------------------------------------------ the watcher
    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            self._tick.wait(5.0)
            self._tick.clear()
            if self._stop.is_set():
                return
            try:
                self.watch_once()
            except FellowsError as exc:
                log.warning("metrics: %s", exc)
            except Exception:
                log.exception("metrics: failed; tried again at the next poll")

    def watch_once(self, now: float | None = None) -> None:
        """Journal the SLURM call counts if they changed, tell the budget thresholds passed, rewrite the textfile."""
        at = time.monotonic()
        if self._calls is not None and at >= self._calls_due:
            calls = {c: dict(n) for c, n in self._calls().items()}
            if calls != self._last_calls:  # one small write at most every CALLS_EVERY_SECONDS, only on a change
                remember_calls(self.journal, calls)
                self._last_calls = calls
                self._calls_due = at + CALLS_EVERY_SECONDS
        budget = self._budget()
        if budget is not None and budget.limited:
            self.thresholds(budget, time.time() if now is None else now)
        if at >= self._outages_due:
            self._outages_due = at + OUTAGE_EVERY_SECONDS
            self.outages(time.time() if now is None else now)
        if self.config.metrics.textfile is not None:
            try:
                write_textfile(str(self.config.metrics.textfile), self.journal, budget)
            except OSError as exc:
                log.error("[metrics] textfile = %s cannot be written: %s", self.config.metrics.textfile, exc)

    def outages(self, now: float) -> list[str]:
        """Journal one ``attention`` event per cluster outage that has lasted longer than the park cap of a rung
        waiting on it (the dispatches' ``pause`` steps say when it began; told once per outage, however many
        dispatches wait on it); returns the event ids."""
        told: list[str] = []
        by_lane: dict[str, list[tuple[str, int, float, str, float]]] = {}
        for paused in self.journal.paused():
            by_lane.setdefault(paused[3], []).append(paused)
        for lane, waiting in sorted(by_lane.items()):
            first = min(waiting, key=lambda p: p[2])
            cap = min(p[4] for p in waiting)
            if now - first[2] <= cap:
                continue
            key = f"{_OUTAGE}{lane}.{first[1]}"  # the outage's first pause step: once per outage
            if self.journal.get_meta(key) is not None:
                continue
            down = now - first[2]
            facts = {
                "result": "UNREACHABLE",
                "lane": lane,
                "since_seconds": round(down, 1),
                "dispatches": sorted(p[0] for p in waiting),
                "reason": f"cluster {lane} has not answered for {down:.0f} s, longer than a waiting rung's "
                f"park cap ({cap:g} s); {len(waiting)} dispatch(es) wait, their windows stopped",
            }
            with self.journal.batch():  # the mark and its event together: told once, never lost
                self.journal.put_meta(key, now)
                told.append(self.journal.put_event("", Event.ATTENTION, now, facts))
            log.warning("notify: %s", facts["reason"])
        return told

    def thresholds(self, budget: BudgetConfig, now: float) -> list[str]:
        """Journal a ``budget_threshold`` event for each window that passed 80 % or 100 % of its limit since it
        began (once per window and threshold); returns the event ids."""
        s = read_spend(self.journal, budget, now)
        told: list[str] = []
        windows = []
        if budget.paid_gpu_hours_per_day is not None:
            windows.append(("day_gpu_hours", s.day.start, s.day.total.worst_gpu_hours, budget.paid_gpu_hours_per_day))
        if budget.paid_cost_per_month is not None:
            used = s.month.total.worst_cost or 0.0
            windows.append(("month_cost", s.month.start, used, budget.paid_cost_per_month))
        for window, start, used, limit in windows:
            for percent in THRESHOLDS:
                key = f"{_PASSED}{window}.{start:.0f}.{percent}"
                if used < limit * percent / 100 or self.journal.get_meta(key) is not None:
                    continue
                facts = {"window": window, "percent": percent, "used": used, "limit": limit, "reason": ""}
                facts["reason"] = f"{window} used {used:g} of {limit:g} ({percent} % passed)"
                with self.journal.batch():  # the mark and its event together: told once, never lost
                    self.journal.put_meta(key, now)
                    told.append(self.journal.put_event("", Event.BUDGET_THRESHOLD, now, facts))
        return told
