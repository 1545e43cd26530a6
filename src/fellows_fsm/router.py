"""The router: takes jobs, embeds one lifecycle machine per dispatch, drives them all from one poll loop.

One ``observe`` call (one squeue) per tick covers every live dispatch; a bound on rung changes per tick
prevents cancel/resubmit storms; a dispatch that parks out of the whole ladder is handed to the next lane
exactly once. Everything is journaled ahead, and ``recover`` resumes after a crash. It prints nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config import Config, Ladder, Rung
from fellows_fsm.errors import ConfigError, SchedulerError, SchedulerUnreachable, SubmitRejected
from fellows_fsm.journal import DispatchRow, Journal
from fellows_fsm.lanes import FELLOWS, CommandLane, HandoffResult
from fellows_fsm.lifecycle import CANCELLED, FAILED_TO_GCP, PARKED, Dispatch
from fellows_fsm.scheduler import JobSpec, Observation, Phase, Scheduler

__all__ = ["Handle", "Router", "TickReport"]

log = logging.getLogger(__name__)

INTENTS = ("prod", "debug")
_LADDER_MOVES = frozenset({"drop", "cancel", "resubmit", "move", "give_up"})


@attrs.frozen
class Handle:
    """What ``dispatch`` returns at once, and what ``status`` reports: where a dispatch stands."""

    dispatch_id: str
    lane: str
    state: str
    """The state label, e.g. ``SUBMITTED(high-eur)``, ``RESUBMITTED(normal-eur)``, ``RUNNING``."""
    qos: str | None
    slurm_job_id: str | None
    final: bool = False
    outcome: str = ""

    @classmethod
    def from_row(cls, row: DispatchRow) -> Handle:
        """A handle from a journal row."""
        return cls(row.id, row.lane, row.label, row.qos, row.job_id, row.final, row.outcome)


@attrs.frozen
class TickReport:
    """What one poll did: for the live view, the logs and the tests that count scheduler calls."""

    at: float
    live: int
    observed: int
    rung_changes: int
    deferred: int
    """Dispatches that wanted to change rung but waited for the per-tick bound."""
    handoffs: tuple[str, ...]
    failures: tuple[str, ...]
    """One line per dispatch that failed this tick (a failed handoff command, a refused submit)."""
    unreachable: bool


class Router:
    """Drives every dispatch of one journal; only one Router may drive a journal at a time."""

    def __init__(
        self,
        config: Config,
        scheduler: Scheduler,
        journal: Journal,
        *,
        clock: Clock | None = None,
        lanes: Mapping[str, CommandLane] | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.journal = journal
        self.clock: Clock = clock or SystemClock()
        self.lanes: dict[str, CommandLane] = (
            dict(lanes) if lanes is not None else {lane.name: CommandLane(lane) for lane in config.lanes}
        )
        self.live: dict[str, Dispatch] = {}
        """Dispatches on the ladder (or waiting for their handoff), by id."""
        self.deferred = 0
        """Dispatches that waited for the per-tick bound on rung changes in the last tick."""
        self.pending_handoffs: dict[str, tuple[str, JobSpec]] = {}
        """Dispatches pinned to a command lane whose command has not run (or not been recorded) yet."""
        journal.acquire_driver()
        self.recover()

    # ----------------------------------------------------------------- taking jobs
    def dispatch(
        self,
        spec: JobSpec,
        *,
        intent: str = "prod",
        pin: str | None = None,
        ladder: Ladder | None = None,
        note: str = "",
    ) -> Handle:
        """Start a dispatch and return its handle at once (the poll loop drives it from here).

        ``pin="fellows"`` submits on the first rung and never walks; ``pin=<lane>`` goes straight to that
        command lane. A refused first submit raises SubmitRejected and leaves nothing queued. ``ladder``
        replaces the intent's ladder (the preflight's kept rungs); ``note`` is journaled on the first step.
        """
        if intent not in INTENTS:
            raise ConfigError(f"intent={intent!r} is not known; use 'prod' or 'debug'")
        if pin is not None and pin != FELLOWS and pin not in self.lanes:
            known = ", ".join([FELLOWS, *self.lanes])
            raise ConfigError(f"--pin {pin!r} is not a configured lane; known lanes: {known}")
        dispatch_id = uuid.uuid4().hex[:12]
        now = self.clock.now()
        if pin is not None and pin != FELLOWS:
            self.journal.add_lane_dispatch(dispatch_id, spec, intent=intent, lane=pin, at=now)
            self.pending_handoffs[dispatch_id] = (pin, spec)
            self._hand_off(dispatch_id, pin, spec)
            return self.handle(dispatch_id)
        fellows = self.config.fellows
        if intent == "debug" and fellows.debug_qos is not None and not spec.name.startswith(fellows.debug_name_prefix):
            spec = attrs.evolve(spec, name=fellows.debug_name_prefix + spec.name)
        d = self._new(dispatch_id, spec, intent, pinned=pin == FELLOWS, ladder=ladder)
        d.note = note
        self.journal.add_dispatch(d, intent=intent, lane=FELLOWS, at=now)
        try:
            d.submit()
        except SubmitRejected as exc:
            self.journal.finish(d.id, state=d.state, label=d.label, outcome=f"rejected: {exc}", at=self.clock.now())
            raise
        except SchedulerUnreachable as exc:
            log.warning("dispatch %s: first submit did not get an answer (%s); retrying by token", d.id, exc)
        self.live[d.id] = d
        return self.handle(d.id)

    def _new(
        self, dispatch_id: str, spec: JobSpec, intent: str, *, pinned: bool, ladder: Ladder | None = None
    ) -> Dispatch:
        return Dispatch(
            dispatch_id,
            spec,
            ladder or self.config.fellows.ladder_for(intent),
            self.scheduler,
            self.clock,
            self.journal,
            pinned=pinned,
            controller_deadline=self.config.router.controller_deadline,
            in_place=self.config.router.change_rung == "in-place",
        )

    def handle(self, dispatch_id: str) -> Handle:
        """Where a dispatch stands, from the journal."""
        row = self.journal.dispatch(dispatch_id)
        if row is None:
            raise ConfigError(f"dispatch {dispatch_id!r} is not in the journal {self.journal.path}")
        return Handle.from_row(row)

    # ----------------------------------------------------------------- the poll loop
    def poll(self) -> TickReport:
        """One tick: park on time, cancel in one call, observe every live job in ONE call, then move on.

        The park decision needs no observation (a window closes on the clock; the last observation showed
        the job pending), so the tick's single observe also reads back the cancels it just sent: a job
        that started before its cancel landed shows up STARTED and wins.
        """
        now = self.clock.now()
        handoffs: list[str] = []
        failures: list[str] = []
        for dispatch_id, (lane, spec) in list(self.pending_handoffs.items()):
            self._hand_off(dispatch_id, lane, spec, handoffs, failures)
        # 1. Time alone: every rung whose window closed parks now; a rung without a job gets one. A park
        #    announces no side effect of its own (the cancel comes in step 2), so all of them share one commit.
        expired = [d for d in self.live.values() if d.on_rung and d.job_id is not None and d.rung_expired()]
        with self.journal.batch():
            for d in expired:
                self._advance(d, None, False, failures)
        for d in list(self.live.values()):
            self._advance(d, None, False, failures)
        # 2. At most max_rung_changes_per_tick dispatches change rung; their jobs are cancelled in ONE call,
        #    each only if still pending.
        movers = [d for d in self.live.values() if d.state in (PARKED, CANCELLED) and d.walks_ladder()]
        budget = self.config.router.max_rung_changes_per_tick
        chosen, deferred = movers[:budget], max(0, len(movers) - budget)
        to_cancel = [
            d.job_id
            for d in chosen
            if d.state == PARKED and d.job_id is not None and not d.job_gone() and not d.in_place
        ]
        try:
            if to_cancel:
                self.scheduler.cancel_if_pending(to_cancel, read_back=False)
        except SchedulerUnreachable as exc:
            log.warning("cancels deferred to the next tick: %s", exc)
            chosen = []
        # 3. ONE observe of every live job; for the jobs just cancelled it is their read-back.
        job_ids = [d.job_id for d in self.live.values() if d.job_id is not None and not d.is_final]
        try:
            observations = self.scheduler.observe(job_ids) if job_ids else {}
        except SchedulerUnreachable as exc:
            log.warning("poll skipped: %s", exc)
            return TickReport(now, len(self.live), 0, 0, deferred, tuple(handoffs), tuple(failures), True)
        # 4. Every machine moves on fresh state; only the chosen may change rung, and a parked one only
        #    once the observation confirms its job gone (or started: the late start wins).
        chosen_ids = {d.id for d in chosen}
        changes = 0
        for d in list(self.live.values()):
            obs = observations.get(d.job_id) if d.job_id is not None else None
            # An in-place dispatch moves its still-pending job with scontrol in this step instead.
            confirmed = d.state != PARKED or obs is None or obs.phase in (Phase.STARTED, Phase.GONE) or d.in_place
            before = len(d.history)
            self._advance(d, obs, d.id in chosen_ids and confirmed, failures)
            if {s.trigger for s in d.history[before:]} & _LADDER_MOVES:
                changes += 1
        for d in list(self.live.values()):
            if d.state == FAILED_TO_GCP:
                self._hand_off_after_ladder(d, handoffs, failures)
            elif d.is_final:
                del self.live[d.id]
        self.deferred = deferred
        return TickReport(now, len(self.live), len(job_ids), changes, deferred, tuple(handoffs), tuple(failures), False)

    def _advance(self, d: Dispatch, obs: Observation | None, may_change_rung: bool, failures: list[str]) -> None:
        """Advance one dispatch; a scheduler error fails this dispatch's step, never the whole tick."""
        try:
            d.advance(obs, may_change_rung=may_change_rung)
        except SchedulerUnreachable as exc:
            log.warning("dispatch %s: %s; will retry next tick", d.id, exc)
        except SchedulerError as exc:
            failures.append(f"dispatch {d.id}: {exc}")
            log.warning("dispatch %s: %s", d.id, exc)

    def run(
        self,
        *,
        until: Callable[[TickReport], bool] | None = None,
        on_tick: Callable[[TickReport], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> TickReport:
        """Poll until every dispatch is final (or ``until`` says stop), sleeping to the next poll or deadline.

        A slow or unreachable controller stretches the interval (doubling, up to 8 polls).
        """
        interval = self.config.fellows.poll_interval_seconds
        backoff = interval
        while True:
            started = time.monotonic()
            report = self.poll()
            if on_tick is not None:
                on_tick(report)
            if (until is not None and until(report)) or not (self.live or self.pending_handoffs):
                return report
            took = time.monotonic() - started
            # Unreachable: double the wait; slow: never poll more often than twice the poll's own cost.
            backoff = min(backoff * 2, 8 * interval) if report.unreachable else max(interval, 2 * took)
            sleep(self._next_sleep(backoff))

    def _next_sleep(self, interval: float) -> float:
        """Sleep to the next poll, or to the earliest rung deadline, or at once for a dispatch mid-change."""
        now = self.clock.now()
        if self.deferred:
            return min(interval, 1.0)  # held back by the per-tick bound: a short beat, never a storm
        if any(d.state in (PARKED, CANCELLED) and d.walks_ladder() for d in self.live.values()):
            return 0.05  # parked late in the last tick (e.g. a window that closed during it): cancel now
        deadlines = [d.deadline for d in self.live.values() if d.on_rung and not d.pinned]
        wake = min([now + interval, *deadlines])
        return max(0.05, wake - now)

    # ----------------------------------------------------------------- handing off
    def _hand_off_after_ladder(self, d: Dispatch, handoffs: list[str], failures: list[str]) -> None:
        """Hand a dispatch that parked out of the whole ladder to the next lane in the auto order."""
        following = self.config.auto_order[1:]
        if not following:
            self.journal.finish(d.id, state=d.state, label=d.label, outcome="no-fallback-lane", at=self.clock.now())
            del self.live[d.id]
            return
        self._hand_off(d.id, following[0], d.spec, handoffs, failures)
        del self.live[d.id]

    def _hand_off(
        self,
        dispatch_id: str,
        lane_name: str,
        spec: JobSpec,
        handoffs: list[str] | None = None,
        failures: list[str] | None = None,
    ) -> None:
        """Run a lane's command for a dispatch exactly once (journaled before it runs)."""
        lane = self.lanes[lane_name]
        previous = self.journal.handoff(dispatch_id)
        if previous is not None and previous.status != "started":
            self.pending_handoffs.pop(dispatch_id, None)
            return  # already done or failed: never twice
        argv = lane.command(dispatch_id, spec)
        if previous is None:
            self.journal.start_handoff(dispatch_id, lane_name, argv, self.clock.now())
            result = lane.hand_off(argv)
        elif lane.already_has(dispatch_id, spec):
            # A crash came during the command; the lane's probe says it took the job.
            result = HandoffResult(argv, 0, "", "(handoff found by the lane's probe after a restart)")
        else:
            # A crash came during the command and nothing can tell whether it ran: run it again
            # (exactly-once needs an idempotent command or a probe; see docs/configuration.md).
            result = lane.hand_off(argv)
        self.journal.finish_handoff(
            dispatch_id,
            exit_status=result.exit_status,
            stdout=result.stdout,
            stderr=result.stderr,
            at=self.clock.now(),
            ok=result.ok,
        )
        self.pending_handoffs.pop(dispatch_id, None)
        if handoffs is not None:
            handoffs.append(dispatch_id)
        if not result.ok and failures is not None:
            last = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            failures.append(f"dispatch {dispatch_id}: {lane_name} command exited {result.exit_status}: {last}")

    # ----------------------------------------------------------------- restart
    def recover(self) -> list[str]:
        """Reload every non-final dispatch from the journal, exactly where it stood; return their ids."""
        recovered = []
        for row in self.journal.dispatches(live_only=True):
            spec = _spec(row)
            if row.lane != FELLOWS:
                self.pending_handoffs[row.id] = (row.lane, spec)
                recovered.append(row.id)
                continue
            ladder = Ladder(tuple(Rung(**r) for r in row.ladder))
            jobs = {j.rung_index: j.job_id for j in self.journal.jobs(row.id)}
            d = Dispatch.restore(
                row.id,
                spec,
                ladder,
                self.scheduler,
                history=self.journal.steps(row.id),
                jobs=jobs,
                clock=self.clock,
                recorder=self.journal,
                pinned=row.pinned,
                controller_deadline=self.config.router.controller_deadline,
                in_place=self.config.router.change_rung == "in-place",
            )
            self.live[d.id] = d  # one never submitted (no steps) is submitted by the next poll
            recovered.append(d.id)
        return recovered

    def is_done(self, dispatch_id: str) -> bool:
        """True once the dispatch is final (RUNNING, handed off, rejected, or ended while pinned)."""
        return self.handle(dispatch_id).final


def _spec(row: DispatchRow) -> JobSpec:
    values = dict(row.spec)
    values["extra_args"] = tuple(values.get("extra_args", ()))
    return JobSpec(**values)
