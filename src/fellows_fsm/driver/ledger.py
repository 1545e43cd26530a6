"""The [budget] counted in the shared ledger (``[ledger]``), behind the same gate as the journal's count
(driver/budget.py: ``TickGate`` asks ``LedgerGate`` instead of counting its journal): the guard's question "does
this paid run fit?" is answered by reserving it, in one ledger transaction, so a yes is a reservation held. It is
asked of the ledger every time (at most once a tick per dispatch), a reservation already held included: the answer
a handoff leaves on is the ledger's own, never a memory of it that may have lapsed or been released meanwhile.

A reservation lives as its dispatch does (``reconcile``: driver/reconciler.py, a thread of its own, from a snapshot
the tick hands it while this driver holds any, and at its first tick): renewed while the dispatch is on its way to
a paid lane (one that lapsed first is released, and the gate asks the budget again), marked created once a paid
run is journaled (kept, with no lease, until the run is followed to its end), settled with what the run really ran
and cost, released when the dispatch will never be handed off (a late free start, a cancel, a restart after a
driver died between its reservation and its park). One this driver never renews lapses after ``[ledger]
lease_seconds``.

The ledger unreachable (or refusing) is an answer too: the run does not fit, with that reason (the dispatch waits
on its last free rung, or ends NO_BUDGET with on_budget = "refuse"). Only a paid handoff asks it on the tick, and
only while it answers: once an ask failed, the tick asks no more (every ask gets the reason at once) and a probe on
a thread of its own (``_Probe``: a connection and ``SELECT 1``, every ``RETRY_SECONDS``) waits for it to answer
again; then the next handoff asks. So a ledger that stops answering costs the driver's tick one ask's bound, once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.ledger import LedgerConfig
from fellows_fsm.core.budget import BudgetGate
from fellows_fsm.core.paid import worst_gpu_hours
from fellows_fsm.driver.publisher import Publisher
from fellows_fsm.driver.reconciler import PaidRuns, Reconciler, Snapshot
from fellows_fsm.errors import ConfigError, FellowsError, LedgerUnreachable
from fellows_fsm.journal.store import Journal
from fellows_fsm.ledger.store import Identity, Ledger
from fellows_fsm.scheduler.port import JobSpec

__all__ = ["FREE_EVERY_SECONDS", "LIVE_EVERY_SECONDS", "RETRY_SECONDS", "LedgerGate", "check_ledger"]

log = logging.getLogger(__name__)

RETRY_SECONDS = 10.0
"""After the ledger did not answer (or refused), how often the probe (off the tick) asks whether it answers again."""
FREE_EVERY_SECONDS = 60.0
"""How often the free jobs' ends journaled since are written to the ledger (one transaction each time)."""
LIVE_EVERY_SECONDS = 30.0
"""How often a driver publishes its live dispatches to the ledger (``status --team``), and when it stops."""
FREE_LOOKBACK_SECONDS = 2 * 86400.0
"""How far back a starting driver hands over free ends (the ledger keeps each once): an end journaled by a driver
that died before telling the ledger is told by the next one within that."""
FREE_BATCH = 1000
"""At most this many free ends a time (a first publish of a long journal goes on at the next ones)."""


_CHECKED: set[LedgerConfig] = set()
"""The ledgers this process found answering with a schema it knows: asked once, not per dispatch of a batch."""


def check_ledger(config: LedgerConfig) -> str | None:
    """Before anything is queued for a dispatch that may be handed to a paid lane: connect, and bring the ledger's
    schema up to date. Raises what waiting cannot fix (``LedgerRefused``: a wrong password, no such database, a newer
    schema; ``ConfigError``: ``password_env`` unset), exit 3; returns a warning when the ledger does not answer now
    (the dispatch walks the free rungs; its paid handoff waits for the ledger), None when it answers."""
    if config in _CHECKED:
        return None
    ledger = Ledger(config)
    try:
        ledger.check()
    except LedgerUnreachable as exc:
        return f"{exc}; the free rungs go ahead, a paid handoff waits until it answers"
    finally:
        ledger.close()
    _CHECKED.add(config)
    return None


class LedgerGate:
    """This driver's side of the shared ledger: its identity (team, user, machine, journal), the dispatches it holds
    a reservation for, and the ledger's last failure."""

    def __init__(
        self,
        config: LedgerConfig,
        journal: Path,
        *,
        ledger: Ledger | None = None,
        reconcile_ledger: Ledger | None = None,
        probe_ledger: Ledger | None = None,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.retry_seconds = retry_seconds
        """After a failure, how often the probe asks whether the ledger answers again."""
        self.config = config
        self.ledger = ledger if ledger is not None else Ledger(config)
        self.who = Identity(
            team=config.team or "", user=config.user, machine=config.machine, journal=str(journal.absolute())
        )
        self.held: set[str] = set()
        """Dispatch ids holding a reservation, as this driver knows (the last reconcile's, and its own since)."""
        self._answers: dict[str, str | None] = {}  # this tick's answer per dispatch: one round trip each, at most
        self._seq = 0  # this tick's number
        self._asked: dict[str, int] = {}  # the tick each dispatch last asked the ledger (the reconcile's race)
        self._asked_lock = threading.Lock()
        self._down: str | None = None
        self._reconciled = False
        self._free_since: float | None = None  # the latest free end handed to the publisher
        self._free_due = 0.0  # (monotonic) when the free ends are written next
        self._live_due = 0.0  # (monotonic) when the live dispatches are published next
        self.round_trips = 0
        """How many reservations were asked of the ledger (what a test reads)."""
        self.reconciler = Reconciler(
            reconcile_ledger if reconcile_ledger is not None else Ledger(config),
            self.who,
            self._asked_at,
            retry_seconds=retry_seconds,
        )
        """Each reservation's life, brought in line with the journal by a thread of its own (``reconcile``)."""
        self.publisher = Publisher(config, self.who, retry_seconds=retry_seconds)
        """What the ledger is told that decides nothing (free ends, live dispatches), written by a thread of its own."""
        self.probe = _Probe(probe_ledger if probe_ledger is not None else Ledger(config), retry_seconds)
        """Whether the ledger answers again, asked off the tick once an ask failed."""

    def close(self) -> None:
        """Close the connection to the ledger (the next ask connects again) and stop the publisher and the
        reconciler, which finish what they were given first (waiting at most the connect timeout and a little)."""
        self.probe.close(timeout=self.config.connect_timeout_seconds + 2.0)
        self.reconciler.close(timeout=self.config.connect_timeout_seconds + 2.0)
        self.publisher.close(timeout=self.config.connect_timeout_seconds + 2.0)
        self.ledger.close()

    def tick(self) -> None:
        """A new tick: every dispatch is asked again; the latest reconcile's result is taken in (between ticks, so
        what the gate holds never changes within one)."""
        self._seq += 1
        self._answers.clear()
        outcome = self.reconciler.outcome()
        if outcome is None:
            return
        with self._asked_lock:
            since = {d for d, seq in self._asked.items() if seq >= outcome.seq}
            self._asked = {d: seq for d, seq in self._asked.items() if seq >= outcome.seq}
        self.held = set(outcome.kept) | (self.held & since)
        self._reconciled = True

    def _asked_at(self, dispatch_id: str) -> int:
        """The tick this dispatch last asked the ledger (-1: not since the last reconcile taken in)."""
        with self._asked_lock:
            return self._asked.get(dispatch_id, -1)

    # ----------------------------------------------------------------- the gate
    def refusal(self, dispatch_id: str, spec: JobSpec, price: float | None, limits: BudgetConfig) -> str | None:
        """Why this dispatch's paid run would pass the budget (one line), or None: it fits, and its worst case is
        reserved in the ledger (or it already held a reservation, or it needs no paid GPU-hours)."""
        if dispatch_id in self._answers:
            return self._answers[dispatch_id]
        # What no spending can change is answered here, with no round trip (no limit, over the per-job cap...).
        answer = BudgetGate.counted(limits, 0.0, 0.0, price).refusal_at(dispatch_id, spec, price)
        need = worst_gpu_hours(spec.gpus, spec.time_limit_seconds)
        if answer is None and need and not math.isinf(need):
            answer = self._reserve(dispatch_id, spec, price, limits)
        self._answers[dispatch_id] = answer
        return answer

    def take(self, dispatch_id: str, spec: JobSpec, price: float | None, limits: BudgetConfig) -> None:
        """The dispatch leaves for the paid lane: its guard asked ``refusal`` this tick, which reserved its worst case
        (or confirmed the reservation it held). Asked now if not (never the case through the lifecycle's rows)."""
        if dispatch_id in self._answers and self._answers[dispatch_id] is None:
            return
        self._answers.pop(dispatch_id, None)
        why = self.refusal(dispatch_id, spec, price, limits)
        if why is not None:
            log.error("dispatch %s was handed a paid lane its guard did not ask the ledger for: %s", dispatch_id, why)

    def _reserve(self, dispatch_id: str, spec: JobSpec, price: float | None, limits: BudgetConfig) -> str | None:
        down = self._still_down()
        if down is not None:
            return down
        limit = float(spec.time_limit_seconds or 0.0)

        def decide(day_gpu_hours: float, month_cost: float) -> str | None:
            return BudgetGate.counted(limits, day_gpu_hours, month_cost, price).refusal_at(dispatch_id, spec, price)

        self.round_trips += 1
        with self._asked_lock:
            self._asked[dispatch_id] = self._seq  # before the round trip: a reconcile never releases it under us
        try:
            answer = self.ledger.reserve(
                self.who,
                team_scope=limits.scope == "team",
                zone=limits.timezone,
                dispatch_id=dispatch_id,
                gpus=spec.gpus,
                limit_seconds=limit,
                price=price,
                decide=lambda totals: decide(totals.day_gpu_hours, totals.month_cost),
            )
        except (LedgerUnreachable, ConfigError) as exc:
            return self._went_down(exc)
        self._down = None
        if answer is None:
            self.held.add(dispatch_id)
        return answer

    # ----------------------------------------------------------------- the ledger down
    def _still_down(self) -> str | None:
        """The reason the ledger cannot be asked, until the probe finds it answering (then None: ask it)."""
        if self._down is not None and self.probe.answered:
            self._down = None
        return self._down

    def _went_down(self, exc: Exception) -> str:
        scope = "" if isinstance(exc, LedgerUnreachable) else " (it refused this driver)"
        reason = (
            f"budget: the shared ledger {self.config.shown} cannot be asked{scope}, so no paid job is handed off "
            "until it answers"
        )
        if reason != self._down:
            log.warning("%s: %s", reason, exc)
        self._down = reason
        self.probe.start()
        return reason

    @property
    def down(self) -> str | None:
        """Why the ledger cannot be asked now (None: it answered last, or was not asked yet)."""
        return self._still_down()

    # ----------------------------------------------------------------- what the ledger is told (off the tick)
    def publish_free(self, journal: Journal, now: float, *, at_once: bool = False) -> int:
        """Hand the publisher (driver/publisher.py: its own thread) the free jobs' ends journaled since the last
        time (from ``FREE_LOOKBACK_SECONDS`` before the first call: one already in the ledger is kept once), at most
        once every ``FREE_EVERY_SECONDS`` (``at_once``: now, as the driver stops); return how many. They count in
        no budget: what the free clusters gave."""
        if not at_once and time.monotonic() < self._free_due:
            return 0
        self._free_due = time.monotonic() + FREE_EVERY_SECONDS
        since = now - FREE_LOOKBACK_SECONDS if self._free_since is None else self._free_since
        ends = journal.ends_since(since, FREE_BATCH)
        self.publisher.offer(
            free=[(e.dispatch_id, e.job_id or "", e.lane, e.gpus, e.gpu_hours, e.result, e.ended_at) for e in ends]
        )
        self._free_since = ends[-1].ended_at if ends else since
        if len(ends) == FREE_BATCH:
            self._free_due = 0.0  # more to hand over: the next tick goes on
        return len(ends)

    def publish_live(self, journal: Journal, *, now: bool = False) -> int:
        """Hand the publisher this journal's live dispatches (state, label, lane, QoS, outcome), which replace what
        this driver published before: at most once every ``LIVE_EVERY_SECONDS`` (``now``: at once, as the driver
        stops); return how many."""
        if not now and time.monotonic() < self._live_due:
            return 0
        self._live_due = time.monotonic() + LIVE_EVERY_SECONDS
        rows = [
            (d.id, str(d.spec.get("name", "")), d.state, d.label, d.lane, d.qos, d.outcome)
            for d in journal.dispatches(live_only=True)
        ]
        self.publisher.offer(live=rows)
        return len(rows)

    # ----------------------------------------------------------------- each reservation's life (off the tick)
    def reconcile(self, journal: PaidRuns, waiting: Callable[[], Collection[str]], now: float, *, asked: bool) -> None:
        """Hand the reconciler (driver/reconciler.py: its own thread) this tick's snapshot: the dispatches on their
        way to the paid lane (``waiting()``, read only when a reconcile is due), to renew those reservations whose
        lease has not run out, mark created those with a live paid run, settle those whose run ended and release
        the rest. Due at the first tick (``asked``: the budget is limited, so the gate may be asked) and then at
        every tick while this driver holds a reservation; its result is taken in at a later tick (``tick``)."""
        if (self._reconciled or not asked) and not self.held:
            return
        self.reconciler.offer(Snapshot(self._seq, frozenset(waiting()), now, journal))


class _Probe:
    """Whether the ledger answers again, asked off the tick (a thread and a connection of its own): a connection and
    ``SELECT 1`` (``Ledger.check``) every ``every`` seconds until one answers; the gate asks nothing meanwhile."""

    def __init__(self, ledger: Ledger, every: float) -> None:
        self._ledger = ledger
        self._every = max(every, 0.05)
        self._answered = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.tries = 0
        """How many times the ledger was asked (what a test reads)."""

    @property
    def answered(self) -> bool:
        """Did the ledger answer since the probe last started?"""
        return self._answered.is_set()

    def start(self) -> None:
        """Ask until the ledger answers (a probe asking already goes on); returns at once."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            if not self._answered.is_set():
                return
            thread.join()  # it answered and is ending: a new round
        self._answered.clear()
        self._thread = threading.Thread(target=self._run, name="ledger-probe", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Wait until the ledger answered (True), or ``timeout`` seconds (False)."""
        return self._answered.wait(timeout)

    def close(self, timeout: float) -> None:
        """Stop asking (waiting at most ``timeout`` seconds for an ask under way) and close the connection."""
        self._stopping.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        if thread is None or not thread.is_alive():
            self._ledger.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.tries += 1
            try:
                self._ledger.check()
            except FellowsError as exc:  # still down, or refusing: asked again later
                log.debug("the shared ledger still cannot be asked: %s", exc)
                if self._stopping.wait(self._every):
                    return
                continue
            except Exception as exc:  # a probe that died would leave the gate down for good: said, asked again
                # (its kind only: an unexpected error's words are not ours to know free of the ledger's secrets)
                log.warning("the probe of the shared ledger failed (%s); it asks again", type(exc).__name__)
                if self._stopping.wait(self._every):
                    return
                continue
            self._ledger.close()  # the gate's own connection asks next; this one is not kept open
            self._answered.set()
            return
