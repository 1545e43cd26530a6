"""The router: takes jobs, embeds one lifecycle machine per dispatch, drives them all from one poll loop.

One ``observe`` call (one squeue) per tick covers every live dispatch; a bound on rung changes per tick
prevents cancel/resubmit storms; a dispatch that parks out of the whole ladder is handed to the next lane
exactly once. Everything is journaled ahead, and ``recover`` resumes after a crash. It prints nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.config.route import Route
from fellows_fsm.core.budget import Reservation
from fellows_fsm.core.dispatch import Dispatch, ended_of, unended
from fellows_fsm.core.effects import Command, CommandEnd
from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.paid import PaidMark, pin_budget_fits
from fellows_fsm.core.vocab import LADDER_LANE, PAID_LIVE_STATES
from fellows_fsm.driver import recovery, strays
from fellows_fsm.driver.budget import TickGate, on_their_way
from fellows_fsm.driver.cadence import unwatched
from fellows_fsm.driver.clusters import Clusters
from fellows_fsm.driver.ends import Follow, handle_of
from fellows_fsm.driver.executor import Executor, TickOutcome
from fellows_fsm.driver.handoffs import HANDOFF_CHECK_SECONDS, Handoffs
from fellows_fsm.driver.inbox import answer_cancels, enqueue, lane_from_json, lane_json, new_id
from fellows_fsm.driver.paid import PaidFollower
from fellows_fsm.driver.reports import Handle, TickReport
from fellows_fsm.driver.roster import Roster
from fellows_fsm.driver.withdrawal import Withdrawal
from fellows_fsm.driver.workload import WorkloadCache
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    Interrupted,
    SchedulerUnreachable,
    SshLoginRefused,
    SubmitRejected,
)
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import HandoffLane, PaidLane
from fellows_fsm.lanes.handoff import Handoff
from fellows_fsm.lanes.registry import build_lanes
from fellows_fsm.scheduler.port import JobSpec, Scheduler, Workload

__all__ = ["Router"]

log = logging.getLogger(__name__)


class Router:
    """Drives every dispatch of one journal; only one Router may drive a journal at a time."""

    def __init__(
        self,
        config: Config,
        scheduler: Scheduler,
        journal: Journal,
        *,
        clock: Clock | None = None,
        lanes: Mapping[str, HandoffLane] | None = None,
        ports: Mapping[str, Scheduler] | None = None,
    ) -> None:
        """Build the driver's parts; nothing is read or written until ``start()``. ``scheduler`` is the fellows
        lane's port; ``ports`` the other SLURM lanes' by name (default: each one's real port)."""
        self.config = config
        self.lanes = build_lanes(config, scheduler=scheduler, handoff=lanes, ports=ports)
        """The SLURM lanes (fellows' port: ``scheduler``) and the lanes a dispatch is handed to, built by kind."""
        self.scheduler = self.lanes.ladder.scheduler
        self.clusters = Clusters({name: lane.scheduler for name, lane in self.lanes.slurm.items()})
        """Every SLURM lane's port: a tick's observe and cancels go to each cluster at once (driver/clusters.py)."""
        self.journal = journal
        self.clock: Clock = clock or SystemClock()
        self.handoffs = Handoffs(journal, self.clock, self.lanes.handoff, self._command_step)
        """The lane commands: waiting to start, running (polled, never waited for), and their results."""
        self.executor = Executor(self.clusters, journal, self.clock, self.handoffs, self._delete_paid)
        """Runs every dispatch's effects (journal first, then the ladder lane's port), batched per tick."""
        interval = config.fellows.poll_interval_seconds
        self.paid = PaidFollower(journal, self.clock, interval=interval, step=self.executor.paid_step)
        """The paid jobs followed to their end: one look per paid lane per poll; their deletes (driver/paid.py)."""
        self.gate = TickGate(journal, config.budget, self._reservations, self._paid_price(), ledger=config.ledger)
        """The [budget], counted at most once a tick from the journal, asked by a last free rung (driver/budget.py)."""
        self.roster = Roster(self.handoffs, self.paid, self.gate)
        """Every dispatch this router drives, shared with recovery and withdrawal."""
        self.withdrawal = Withdrawal(self.roster, self.executor, journal, self.clusters, self.clock)
        """Takes dispatches back: a user's cancel, a Ctrl-C while queuing."""
        self.cluster_workload = WorkloadCache(self.lanes.ladder)
        self.workloads = {name: WorkloadCache(lane) for name, lane in self.lanes.slurm.items() if name != LADDER_LANE}
        """Fellows' and each other SLURM lane's workload for ``park_early = "calibrated"`` (read every few minutes)."""
        self.follow = Follow(config.router.follow_interval_seconds, config.fellows.poll_interval_seconds)
        self.deferred = 0
        """Dispatches that waited for the per-tick bound on rung changes in the last tick."""
        self._last_answer: dict[str, float] = {}
        """When each cluster last answered a tick's observe (the start of its outage, once it stops answering)."""
        self._failed: list[str] = []
        """Failure lines since the last TickReport (besides the handoffs' own)."""
        self._sweep_due = False  # the first answered tick after a recovery looks for strays (strays.py)
        self.started = False
        """True once ``start()`` took the driver lock and recovered the journal."""

    def start(self) -> Router:
        """Take the journal's driver lock (JournalBusy if another process holds it), recover every live dispatch
        and cancel a late job of a recent Ctrl-C; return this router, ready to poll."""
        self.journal.acquire_driver()
        self.recover()
        self.withdrawal.sweep_interrupted()
        self.started = True
        return self

    def _check_started(self) -> None:
        if not self.started:  # without the lock, two processes could drive one journal
            raise FellowsError(
                f"the router of {self.journal.path} has not started: call Router.start() (it takes the driver lock "
                "and recovers the journal) before dispatch, poll or run"
            )

    @property
    def live(self) -> Mapping[str, Dispatch]:
        """Dispatches on the ladder (or waiting for their handoff), by id (the roster's; read only)."""
        return self.roster.live

    @property
    def handing(self) -> Mapping[str, Dispatch]:
        """Ladder dispatches whose fallback lane's command runs (HANDING_OFF), by id (read only)."""
        return self.roster.handing

    @property
    def settings(self) -> Mapping[str, dict[str, Any]]:
        """What each driven dispatch was created with (fallback lane, router options, config file)."""
        return self.roster.settings

    @property
    def running(self) -> dict[str, tuple[str, Handoff]]:
        """Handoff commands under way (lane name, handle), by dispatch id."""
        return self.roster.running

    @property
    def pending_handoffs(self) -> dict[str, tuple[str, JobSpec]]:
        """Dispatches pinned to a command lane whose command has not started yet."""
        return self.roster.pending

    @property
    def busy(self) -> bool:
        """True while any dispatch is on the ladder, waiting for its handoff, or handing off."""
        return self.roster.busy

    @property
    def driven(self) -> list[str]:
        """The ids of every dispatch this router still drives."""
        return self.roster.driven

    @property
    def on_ladder(self) -> tuple[Dispatch, ...]:
        """The dispatches on the ladder now, for read-only views (their deadlines, last observation); never
        advance them from outside: the poll loop does."""
        return tuple(self.roster.live.values())

    def dispatch(
        self,
        spec: JobSpec,
        route: Route | None = None,
        *,
        intent: str = "prod",
        pin: str | None = None,
        ladder: Ladder | None = None,
        note: str = "",
    ) -> Handle:
        """Start a dispatch and return its handle at once (the poll loop drives it from here): the one birth
        path, in one call: ``enqueue`` (the journal row), ``adopt`` (as every tick does), then its first submit.

        ``pin="fellows"`` submits on the first rung and never walks; ``pin=<lane>`` goes straight to that
        command lane (``route`` when given: ``Config.route(pin, intent)``). A refused first submit raises
        SubmitRejected and leaves nothing queued. ``ladder`` replaces the route's (the preflight's kept rungs);
        ``note`` is journaled on the first step.
        """
        self._check_started()
        dispatch_id = new_id()
        try:
            enqueue(
                self.config,
                self.journal,
                spec,
                self.config.route(pin, intent) if route is None else route,
                ladder=ladder,
                note=note,
                at=self.clock.now(),
                dispatch_id=dispatch_id,
            )
            self.adopt()
        except KeyboardInterrupt:
            raise self._interrupted(dispatch_id) from None
        d = self.roster.live.get(dispatch_id)
        if d is None:  # pinned to a command lane: its command starts now, if the [budget] lets it
            lane, lane_spec = self.roster.pending[dispatch_id]
            self.gate.tick(self.clock.now())
            self._start_pinned(dispatch_id, lane, lane_spec)
            return self.handle(dispatch_id)
        try:
            self.executor.start(d)
        except KeyboardInterrupt:
            raise self.withdrawal.interrupted(d) from None
        except SubmitRejected as exc:
            self._reject(d, exc)
            raise
        except SchedulerUnreachable as exc:
            log.warning("dispatch %s: first submit did not get an answer (%s); retrying by token", d.id, exc)
        return self.handle(d.id)

    def _interrupted(self, dispatch_id: str) -> Interrupted:
        """Ctrl-C while a dispatch was being journaled or adopted, before its first submit."""
        row = self.journal.dispatch(dispatch_id)
        if row is not None and row.lane == LADDER_LANE and dispatch_id not in self.roster:
            self.adopt()
        d = self.roster.live.get(dispatch_id)
        if d is not None:
            return self.withdrawal.interrupted(d)
        if row is not None:  # pinned to a command lane, its command not started
            self.withdrawal.withdraw(dispatch_id)
            return Interrupted(f"interrupted: dispatch {dispatch_id} withdrawn (nothing was queued)")
        return Interrupted("interrupted before anything was journaled or queued; nothing to undo")

    def take_requests(self) -> list[str]:
        """Do what other processes asked of this journal's driver (a ``cancel``, through the inbox); return the
        ids withdrawn."""
        return answer_cancels(self.journal, self.withdrawal.withdraw)

    def withdraw(self, dispatch_id: str) -> list[str]:
        """Withdraw a dispatch (a user's ``cancel``): journaled WITHDRAWN first, then every job it got scancelled
        (the recall row); return their ids. A dispatch handed to a command lane cannot be taken back."""
        return self.withdrawal.withdraw(dispatch_id)

    def handle(self, dispatch_id: str) -> Handle:
        """Where a dispatch stands, from the journal."""
        handle = handle_of(self.journal, dispatch_id)  # (with its result once ended: driver/ends.py)
        if handle is None:
            raise ConfigError(f"dispatch {dispatch_id!r} is not in the journal {self.journal.path}")
        return handle

    def poll(self) -> TickReport:
        """One tick: ONE observe of every live job, every dispatch moves on that fresh state, ONE cancel call.

        Parks are decided on the tick's fresh observation, never on an older one: a job held (or cancelled,
        or started) since the last look is seen before anything is done to it. A cancel the port proves (the
        fence held the job pending, then scancel removed it) lets its dispatch resubmit in this same tick;
        any other is read back by the next tick's observe (a job that started before its cancel landed shows
        up STARTED and wins), and only then does that dispatch resubmit.
        """
        self._check_started()
        self.catch_up_unwatched()  # every entry point (the driver's loop, `watch --once` from cron) the same way
        now = self.clock.now()
        self.journal.check_intact()
        self.journal.beat(now)
        self.take_requests()
        self.adopt()
        self.reap_handoffs()
        self.gate.tick(now)
        self.paid.poll()  # ONE look per paid lane for all of its followed jobs (at most once per poll interval)
        self._failed.extend(self.paid.failures)
        self.paid.failures.clear()
        for dispatch_id, (lane, spec) in list(self.roster.pending.items()):
            self._start_pinned(dispatch_id, lane, spec)
        for parked_out in self.roster.take_parked_out(self.gate.unreserved):
            self._hand_off_after_ladder(parked_out)
        # 1. ONE observe of every live job (a running one per follow interval: ends.py), last tick's cancels' read-back.
        walking = self.follow.looked_at(self.live.values(), now)
        job_ids = [d.job_id for d in unended(walking) if d.job_id is not None]
        observations, down = self.clusters.observe_each(job_ids) if job_ids else ({}, {})
        self._last_answer.update({lane: now for lane in self.clusters.ports if lane not in down})
        if down:
            # The clock stops for the dispatches on a cluster that does not answer (journaled); the others move on.
            for lane, exc in down.items():
                log.warning("poll of %s skipped: %s", lane, exc)
                # A login ssh refuses lasts until someone acts: the pause says what (a host key, a key, a name).
                refused = isinstance(exc, SshLoginRefused)
                self._failed.extend([str(exc)] if refused else [])
                why = f"{exc}; the window waits until it answers" if refused else ""
                stopped = [d for d in walking if d.rung.lane == lane]
                self.executor.pause(stopped, self._last_answer.get(lane, 0.0), why=why)
            walking = [d for d in walking if d.rung.lane not in down]
            if not walking:
                return self._report(now, 0, 0, self.deferred, unreachable=True)
        if self._sweep_due:  # after a restart: jobs a killed driver queued but never journaled (strays.py)
            submitted = [d for d in (*self.live.values(), *self.handing.values()) if d.history]
            self._sweep_due = bool(submitted) and strays.sweep(self.clusters, self.executor, submitted) is None
        # 2. Every dispatch moves on that fresh state; the driver runs what they need, batched (one cancel call).
        workload = self._workloads(walking, now)
        rungs = {i: self.live[i].rung_index for i in self.executor.looked_up if i in self.live}
        outcome = self.executor.tick(walking, observations, self.config.rung_changes_per_tick, workload=workload)
        # A lost submit's job may land later: looked for as it changes rung or ends (strays.py), never two jobs.
        moved = [self.live[i] for i, k in rungs.items() if self.live[i].is_final or self.live[i].rung_index != k]
        strays.sweep(self.clusters, self.executor, moved)
        self._settle(outcome)
        for d in ended_of(self.live.values()):
            self.executor.looked_up.discard(d.id)
            self.roster.ended(d.id)
        self.deferred = outcome.deferred
        self.reap_handoffs()  # a command that ends at once (an in-process lane) is reported in this tick
        return self._report(now, len(job_ids), outcome.rung_changes, outcome.deferred, unreachable=False)

    def nudge(self) -> None:
        """On a wake-up between polls: the inbox now (cancels, new dispatches' first submits, batched), no squeue."""
        self.take_requests()
        self.adopt()  # then every dispatch never submitted (those a busy turn left too: ``Executor.unsent``)
        self._settle(self.executor.tick([d for d in self.live.values() if d.job_id is None and not d.history], {}, 0))

    def _settle(self, outcome: TickOutcome) -> None:
        self._failed.extend(outcome.failures)
        for dispatch_id, refusal in outcome.rejected:
            self._reject(self.live[dispatch_id], refusal)
        for dispatch_id in outcome.handoffs:
            self._hand_off_after_ladder(self.live[dispatch_id])

    def _workloads(self, walking: list[Dispatch], now: float) -> Workload | dict[str, Workload] | None:
        """The workload each calibrating dispatch reads: fellows' (one cluster), else each cluster's by lane."""
        if not self.workloads:
            return self.cluster_workload.get(walking, now)
        fellows = self.cluster_workload.get([d for d in walking if d.rung.lane == LADDER_LANE], now)
        out = {} if fellows is None else {LADDER_LANE: fellows}
        for lane, cache in self.workloads.items():
            seen = cache.get([d for d in walking if d.rung.lane == lane], now)
            if seen is not None:
                out[lane] = seen
        return out

    def _reject(self, d: Dispatch, exc: SubmitRejected) -> None:
        """The cluster refused a dispatch's first submit (nothing queued): it ends as refused, with SLURM's reason."""
        self.roster.ended(d.id)  # journaled REFUSED by the refuse row (the driver wrote it before raising)
        self._failed.append(f"dispatch {d.id}: refused by the cluster: {exc}")

    def _report(self, now: float, observed: int, changes: int, deferred: int, *, unreachable: bool) -> TickReport:
        ended, failed = tuple(self.handoffs.ended), (*self._failed, *self.handoffs.failed)
        self.handoffs.ended, self.handoffs.failed, self._failed = [], [], []
        return TickReport(now, len(self.live), observed, changes, deferred, ended, failed, unreachable)

    def run(
        self,
        *,
        until: Callable[[TickReport], bool] | None = None,
        on_tick: Callable[[TickReport], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        linger: bool = False,
        woken: Callable[[], bool] | None = None,
    ) -> TickReport:
        """Poll until every dispatch is final (or ``until`` says stop): ONE poll per poll interval.

        ``linger``: go on polling when nothing is live (the background driver, which adopts what others
        enqueue), until ``until`` says stop. Time in which no tick came (this process stopped, or no driver ran
        before it) is not spent from any window: see ``catch_up``.

        The cadence is the promise to a shared slurmctld: at most one observe (one squeue) and one cancel
        call per interval, whatever the number of dispatches or the spread of their deadlines; a window
        that closes between polls is acted on at the next one (so within one interval). A slow or
        unreachable controller stretches the interval (doubling, up to 8 polls). Between polls only
        running handoff commands are looked at (no SLURM call) and a wake-up (``woken``) is answered (``nudge``).
        """
        interval = self.config.fellows.poll_interval_seconds
        backoff = interval
        clock = self.clock  # the cadence runs on the injected clock, so a simulation's time drives it too
        report = self._report(clock.now(), 0, 0, 0, unreachable=False)
        next_poll = clock.now()
        while True:
            if clock.now() >= next_poll:
                self.catch_up(next_poll)  # a stopped process (SIGSTOP, a laptop asleep) ticks late
                started = clock.now()
                report = self.poll()
                took = clock.now() - started
                # Unreachable: double the wait; slow: at most twice the poll's own cost, never past a window's close.
                backoff = min(backoff * 2, 8 * interval) if report.unreachable else max(interval, 2 * took)
                next_poll = started + backoff
                if not report.unreachable:
                    next_poll = max(started + interval, min(next_poll, self._next_window_close(next_poll)))
            elif self.executor.unsent or (woken is not None and woken()):
                self.nudge()  # the handoffs it starts are reaped from the next turn
            elif self.handoffs.running:
                before = len(self.handoffs.running)
                self.reap_handoffs()
                if len(self.handoffs.running) != before:
                    report = self._report(clock.now(), 0, 0, self.deferred, unreachable=report.unreachable)
                else:
                    report = attrs.evolve(report, handoffs=(), failures=())
            if on_tick is not None:
                on_tick(report)
            if (until is not None and until(report)) or (not linger and not self.busy):
                return report
            wait = next_poll - clock.now()
            if self.handoffs.running:
                wait = min(wait, HANDOFF_CHECK_SECONDS)
            sleep(0.0 if self.executor.unsent else max(0.0, wait))  # a burst's next turn at once

    def _next_window_close(self, default: float) -> float:
        """When the first running window of a walking dispatch closes (``default`` if none runs)."""
        return min(
            (d.deadline for d in self.live.values() if d.on_rung and not d.paused and not d.pinned), default=default
        )

    def catch_up_unwatched(self) -> bool:
        """At this router's first tick (``poll``, whoever calls it): from when the previous driver's next tick was
        due (its last tick, the lock file's record, plus one interval) to now nobody watched (``catch_up``). Once."""
        last, self.journal.last_watched = self.journal.last_watched, None
        return last is not None and self.catch_up(last + self.config.fellows.poll_interval_seconds)

    def catch_up(self, due: float) -> bool:
        """A tick was due at ``due``; if it comes much later (no driver ran, or this one was stopped), stop every
        walking dispatch's clock from ``due``: the next answered tick resumes it, every window later by the gap.
        A rung is tried only while a driver watches it, so a free rung is never passed over for time nobody
        watched. Returns True if it paused anything (driver/cadence.py)."""
        interval = self.config.fellows.poll_interval_seconds
        return unwatched(self.live.values(), self.executor, now=self.clock.now(), interval=interval, due=due)

    def _paid_price(self) -> float | None:
        after = self.config.after_ladder
        lane = self.lanes.handoff.get(after) if after is not None else None
        return lane.price_per_gpu_hour if isinstance(lane, PaidLane) else None

    def _delete_paid(self, dispatch_id: str) -> None:
        self.paid.delete(dispatch_id)  # the executor asks it once the step that wants it is journaled

    def _reservations(self) -> dict[str, Reservation]:
        return on_their_way(self.live.values(), self.gate)

    # ----------------------------------------------------------------- the budget, handing off, restart
    def _start_pinned(self, dispatch_id: str, lane_name: str, spec: JobSpec) -> None:
        """Start the command of a dispatch pinned straight to a lane once the same [budget] a walked handoff asks
        lets it (its rows: ``no_budget``, ``budget_wait``); one that waits stays pending, asked again next tick. A
        command already journaled (a restart) was counted then: it is followed, never asked again."""
        if self.gate.limits.limited and self.journal.handoff(dispatch_id) is None:
            d = self.handoffs.lane_dispatch(dispatch_id)
            lane = self.handoffs.pinned_lanes.get(dispatch_id) or self.handoffs.lanes.get(lane_name)
            gate = self.gate.priced(lane.price_per_gpu_hour if isinstance(lane, PaidLane) else None)
            d.spec, d.paid_gate = spec, gate
            self.executor.lane_look(d)
            if d.is_final:  # NO_BUDGET: nothing was started
                self.roster.ended_before_command(dispatch_id)
                return
            if not pin_budget_fits(d):
                return  # waits for a tick with room (its budget_wait step says why, once per reason)
            gate.take(dispatch_id, spec)  # this tick's next pins see it; its hand_off step journals its paid run
        self.executor.start_lane(dispatch_id, lane_name, spec)

    def _hand_off_after_ladder(self, d: Dispatch) -> None:
        """Hand a dispatch that parked out of the whole ladder to the fallback lane it was created with (the driver
        journals HANDING_OFF, then starts the command), or end it NO_LANE_LEFT if it has none."""
        settings = self.settings.get(d.id, {})
        fallback = settings.get("fallback")
        if "fallback" not in settings:
            # A journal written before dispatches carried their lanes: use this router's configuration.
            following = self.config.after_ladder
            fallback = lane_json(self.config.lane(following)) if following else None
        if fallback is None:
            self.roster.ended(d.id)
            self.roster.handed(d.id)
            self.executor.hand_off(d, None)
            return
        lane = lane_from_json(fallback)
        self.roster.handing_off(d)
        self.executor.hand_off(d, lane.name, self.handoffs.lane_for(lane))

    def _command_step(
        self, dispatch_id: str, trigger: str | CommandEnd, note: str, command: Command, paid: PaidMark | None = None
    ) -> None:
        """A lane command's step (started, run again, ended): its row, fired on the dispatch (a ladder one handing
        off, or one pinned straight to the lane), journaled with the command; a followed lane that has the job
        (PAID_QUEUED) is followed from then on."""
        d = self.roster.handing.get(dispatch_id) or self.handoffs.lane_dispatch(dispatch_id)
        self.executor.command_step(d, trigger, note, command, paid)
        if d.state in PAID_LIVE_STATES:
            lane = self.handoffs.context[dispatch_id][0]
            assert isinstance(lane, PaidLane), "only a followed lane's handoff takes the paid row"
            self.roster.handed(dispatch_id)
            self.paid.follow(d, self.handoffs.running[dispatch_id][0], lane)
        elif d.is_final:
            self.roster.handed(dispatch_id)

    def wait_for_handoffs(self, *, sleep: Callable[[float], None] = time.sleep) -> None:
        """Block until every running handoff command has ended and is recorded (each is bounded by its timeout)."""
        self.handoffs.wait(sleep=sleep)

    def reap_handoffs(self) -> list[str]:
        """Record every handoff command that has ended (or timed out: its group is killed); no SLURM call."""
        return self.handoffs.reap()

    def recover(self) -> list[str]:
        """Reload every non-final dispatch from the journal, exactly where it stood; return their ids. The first
        answered tick then looks for jobs carrying their tokens that the journal does not have (strays.py)."""
        recovered = recovery.recover(self.roster, self.journal, self.config)
        recovery.recover_deletes(self.roster, self.journal)
        self._sweep_due = bool(recovered)
        return recovered

    def adopt(self) -> list[str]:
        """Take on the live dispatches journaled since the last look (through the inbox); return their ids."""
        return recovery.adopt(self.roster, self.journal, self.config)
