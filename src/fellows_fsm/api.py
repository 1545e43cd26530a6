"""The Python API: embed fellows-fsm in another program (submit, follow, watch, status, history, cancel).

A ``Fellows`` drives the journal when it can take the driver lock; otherwise it enqueues its dispatches for
the process that does, follows them read-only, and takes the lock over if that process stops. It prints nothing.
Any thread may use it: one call at a time (a lock), released while ``follow``, ``watch`` or ``cancel`` wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.core.budget import Spend
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.driver.admission import Check, check_request
from fellows_fsm.driver.ends import handle_of, result
from fellows_fsm.driver.inbox import check_cluster, enqueue, enqueue_many, offer_env, remember_config, request_cancel
from fellows_fsm.driver.process import ensure_driver
from fellows_fsm.driver.reports import Handle, Progress, TickReport
from fellows_fsm.driver.router import Router
from fellows_fsm.errors import ConfigError, FellowsError, JournalBusy, SchedulerUnreachable, WaitTimeout
from fellows_fsm.journal.history import HistoryEntry, budget_reason, history_entries, waits_for_budget
from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.queries import RECENT, find, journaled_failure, outcome_error, read_spend, select
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import HandoffLane
from fellows_fsm.lanes.slurm.lane import SLURM, SlurmLane, ladder_lane
from fellows_fsm.scheduler.port import JobSpec, Scheduler
from fellows_fsm.serial import Serial, serialized
from fellows_fsm.slurm.accounting import Grants
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.waiting import UNTIL_END, ended, started_or_final

__all__ = ["Fellows", "Submitted"]

log = logging.getLogger(__name__)


@attrs.frozen
class Submitted:
    """What ``Fellows.submit`` did."""

    handle: Handle
    """The dispatch as journaled right after the submit."""
    driving: bool
    """True if this process drives the journal (it queued the first job itself); False if the dispatch was
    enqueued for the process that drives it, which submits it at once (woken: driver/wake.py)."""
    check: Check
    notes: tuple[str, ...] = ()
    """What sbatch's rendering said besides the job id (e.g. an ``#SBATCH --qos`` line overridden)."""
    budget: str | None = None
    """What this submit did to the journal's [budget] (applied a change, or kept another config's), or None."""

    @property
    def dispatch_id(self) -> str:
        """The dispatch's id (also ``handle.dispatch_id``)."""
        return self.handle.dispatch_id


class Fellows:
    """fellows-fsm for one configuration (its ladder, lanes and journal), embedded in a program.

    Only one process drives a journal at a time (an flock, released by the kernel if it dies). ``submit``
    drives when it can take that lock and otherwise enqueues; ``follow`` and ``watch`` read the journal while
    another process drives it and take the lock over as soon as that process stops. ``status`` and ``history``
    only read. Close it (or use it as a context manager) to release the journal.

    Any thread may call it, one call at a time: a call waits for another thread's to end, except while ``follow``,
    ``watch`` or ``cancel`` sleep between polls (a ``status`` from another thread is answered then). Their
    callbacks run inside the call: one may use this Fellows in its own thread, never wait for another thread that
    does.
    """

    def __init__(
        self,
        config: Config,
        *,
        scheduler: Scheduler | None = None,
        clock: Clock | None = None,
        lanes: Mapping[str, HandoffLane] | None = None,
        grants: Callable[[], Grants] | None = None,
        background: bool = False,
        start_driver: Callable[[Config, Journal], DriverOwner | None] | None = None,
        on_start: Callable[[DriverOwner], None] | None = None,
        ports: Mapping[str, Scheduler] | None = None,
    ) -> None:
        """``scheduler`` defaults to the real SLURM; ``grants`` reads what the cluster grants for the check before
        the first sbatch (default: sacctmgr through a SlurmScheduler; with any other port, no check).

        ``background=True`` hands every dispatch to the journal's background driver (daemon.py): ``submit``
        enqueues and starts that driver if none runs, and returns at once; ``follow``, ``watch`` and ``cancel``
        never drive in this process, so the walk goes on whatever becomes of it. ``start_driver`` starts the
        driver (default ``daemon.ensure_driver``; tests run one in a thread); ``on_start`` is told each time this
        Fellows starts one (the CLI says so on stderr). ``ports``: the other SLURM lanes' ports by name (default:
        each one's real port from its table)."""
        self.serial = Serial()
        """One call at a time, from any thread: the router and the journal are one driver's state."""
        self.config = config
        self.ladder_lane = ladder_lane(config, scheduler)
        """The first SLURM lane (``[fellows]``): its port, and how to read what its cluster grants."""
        self.scheduler: Scheduler = self.ladder_lane.scheduler
        self.clock: Clock = clock or SystemClock()
        self._lanes = lanes
        self._grants = grants if grants is not None else self.ladder_lane.read_grants()
        self._ports = ports
        self.other_lanes = tuple(
            SlurmLane(lane, ports[lane.name])
            if ports and lane.name in ports
            else SLURM.build(lane, state_dir=config.state_dir)
            for lane in config.other_slurm_lanes
        )
        """The SLURM lanes after fellows, in order (their grants are checked before the first sbatch too)."""
        self.journal = Journal(config.journal_path, allow_network_fs=config.allow_network_state_dir)
        self._router: Router | None = None
        self._driver: str | None = None
        self.background = background
        self._start_driver = start_driver or ensure_driver
        self._on_start = on_start
        self.started: DriverOwner | None = None
        """The background driver this Fellows started last, if it started one."""
        self.enqueued: str | None = None
        """The id of the dispatch ``submit`` last journaled for a driver (known even if the submit is interrupted
        while it starts the driver)."""

    # ----------------------------------------------------------------- who drives
    @property
    def driving(self) -> bool:
        """True while this process drives the journal."""
        return self._router is not None

    @property
    def router(self) -> Router | None:
        """The router this process drives the journal with (for read-only views), or None while it does not."""
        return self._router

    @property
    def driver(self) -> str | None:
        """Who drove the journal at the last attempt to take it (its lock file's words); None if this process."""
        return self._driver

    @serialized
    def drive(self) -> bool:
        """Take the driver lock if it is free and recover every live dispatch; True if this process drives now.

        In background mode this process never drives: it starts the background driver if none runs (and the
        journal has work), and returns False."""
        if self.background:
            self.ensure_driver()
            return False
        if self._router is not None:
            return True
        try:
            self.journal.acquire_driver()
        except JournalBusy as exc:
            self._driver = exc.holder
            return False
        try:
            check_cluster(self.config, self.journal)  # its live dispatches are driven on the cluster they were sent to
            self._router = Router(
                self.config, self.scheduler, self.journal, clock=self.clock, lanes=self._lanes, ports=self._ports
            ).start()
        except BaseException:
            self.journal.release_driver()
            raise
        self._driver = None
        return True

    @serialized
    def ensure_driver(self) -> DriverOwner | None:
        """Start the journal's background driver if it has work and nobody drives it; return the record of the
        driver it started (None if one was running or nothing is live). Notes who drives in ``driver``."""
        started = self._start_driver(self.config, self.journal)
        if started is not None:
            self.started = started
            if self._on_start is not None:
                self._on_start(started)
        owner = self.journal.owner()
        self._driver = owner.describe() if owner is not None else None
        return started

    @serialized
    def close(self) -> None:
        """Stop driving (the dispatches go on; the next driver recovers them) and close the journal."""
        if self._router is not None:
            self._router.gate.close()
        self._router = None
        self.journal.close()

    def __enter__(self) -> Fellows:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- submitting
    @serialized
    def check(self, spec: JobSpec, *, intent: str = "prod", pin: str | None = None) -> Check:
        """Check a request against what the cluster grants, before anything is journaled or queued.

        A QoS of the config that the cluster does not have or grant (ConfigError, exit 3), or a job no rung can
        ever start (SubmitRejected, exit 5), is returned as ``refused`` (with the warnings), for ``submit`` to
        raise. Grants are cached beside the journal. An unknown intent raises UsageError, a pin that names no lane
        ConfigError (``Config.route``). A job the command line would refuse (its name, GPUs, time limit, an sbatch
        option fellows-fsm sets itself in ``extra_args``, its script) raises UsageError (exit 2) first, with the
        command line's line (``check_spec``).
        """
        return check_request(self.config, self.config.route(pin, intent), spec, **self._clusters())

    def _clusters(self) -> dict[str, Any]:
        """Where the check before the first sbatch reads each cluster's grants (driver/admission.py:
        ``check_request``)."""
        others = [(lane, lane.read_grants()) for lane in self.other_lanes]
        return {"lane": self.ladder_lane, "clock": self.clock, "read": self._grants, "others": others}

    @serialized
    def submit(
        self, spec: JobSpec, *, intent: str = "prod", pin: str | None = None, check: Check | bool = True
    ) -> Submitted:
        """Dispatch ``spec``: checked first (``check=False`` skips it, a ``Check`` is used as given; a refused
        one is raised), then queued by this process if it can drive the journal, else enqueued for the process
        that drives it.

        ``pin="fellows"`` stays on the first rung; ``pin=<lane>`` goes straight to that command lane. Raises
        SubmitRejected when SLURM refuses the first submit (nothing left queued), SchedulerUnreachable when it did
        not answer it (the dispatch stays journaled; the next poll looks its token up before submitting again),
        and Interrupted on Ctrl-C before the first job was queued (the dispatch is withdrawn). A job the command
        line would refuse raises UsageError before anything is journaled, whatever ``check`` says (``check_spec``).
        """
        route = self.config.route(pin, intent)  # the one answer to where it goes: asked once
        checked = check_request(self.config, route, spec, given=check, **self._clusters())
        if checked.refused is not None:
            raise checked.refused
        if self.background or not self.drive():
            budget = remember_config(self.config, self.journal) if self.background else None
            dispatch_id = enqueue(
                self.config, self.journal, spec, route, ladder=checked.ladder, note=checked.note, at=self.clock.now()
            )
            self.enqueued = dispatch_id
            if self.background:  # the driver started once, now that it has this dispatch to walk
                try:
                    self.ensure_driver()
                except FellowsError as exc:  # the dispatch is journaled: name it, never "submit again"
                    raise journaled_failure(self.journal, dispatch_id, exc) or exc from None
            log.info("dispatch %s enqueued for the driver of %s (%s)", dispatch_id, self.journal.path, self._driver)
            return Submitted(self.handle(dispatch_id), driving=False, check=checked, budget=budget)
        assert self._router is not None
        handle = self._router.dispatch(spec, route, ladder=checked.ladder, note=checked.note)
        notes = self.scheduler.last_notes if isinstance(self.scheduler, SlurmScheduler) else ()
        row = self.journal.dispatch(handle.dispatch_id)
        on_rung = row is not None and row.state.startswith(("SUBMITTED_", "RESUBMITTED_"))
        if row is not None and on_rung and not row.final and row.job_id is None:
            raise SchedulerUnreachable(
                f"SLURM did not answer the submit of dispatch {handle.dispatch_id}; it stays in the journal and "
                "`fellows-fsm watch` retries it (looking its token up first, so never twice)"
            )
        return Submitted(handle, driving=True, check=checked, notes=notes)

    # ----------------------------------------------------------------- following
    @serialized
    def follow(
        self,
        dispatch_id: str,
        *,
        on_change: Callable[[Handle], None] | None = None,
        on_tick: Callable[[Progress], None] | None = None,
        until: Callable[[Progress], bool] | str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        read_every: float | None = None,
    ) -> Handle:
        """Block until the dispatch's job runs (RUNNING, PAID_RUNNING: the driver follows it on to its end), or it
        is final (ended, handed off, refused, withdrawn), or ``until`` says stop; ``until="end"``: until it is
        final (its job ended: the handle's ``result`` and ``exit_code`` say how).

        While this process drives, it drives every live dispatch of the journal meanwhile. While another process
        drives, it reads the journal once per poll interval and tries the lock each time: when that process
        stops (or dies), this one drives, and then also waits for every walking dispatch it took over (so a
        dispatch whose submitter died is finished). ``on_change`` gets the dispatch's handle at the first poll
        (or read) and whenever it changes after; ``on_tick`` every poll or read; ``sleep`` waits between them.
        ``read_every`` reads the journal that often instead (a short wait: the driver wakes for a new dispatch).
        """
        last: list[Handle] = []

        def tick(progress: Progress) -> bool:
            handle = self.handle(dispatch_id)
            if on_change is not None and (not last or handle != last[0]):
                on_change(handle)
            last[:] = [handle]
            if on_tick is not None:
                on_tick(progress)
            return callable(until) and until(progress)

        pace = self.serial.sleeping(sleep if read_every is None else lambda _: sleep(read_every))
        to_end = until == UNTIL_END
        self._loop(
            lambda: ended(self.journal, dispatch_id) if to_end else started_or_final(self.handle(dispatch_id)),
            tick,
            pace,
        )
        return self.handle(dispatch_id)

    @serialized
    def wait(
        self, dispatch_id: str, timeout: float | None = None, *, sleep: Callable[[float], None] = time.sleep
    ) -> str | None:
        """Block until the dispatch is final and return its result (``succeeded``, ``failed``, ``timeout``, ...;
        None: it ended without a job, e.g. refused); WaitTimeout (exit 124) when ``timeout`` seconds pass first."""
        limit = None if timeout is None else self.clock.now() + timeout
        self.handle(dispatch_id)  # (an unknown id: ConfigError)
        self._loop(
            lambda: ended(self.journal, dispatch_id),
            lambda p: limit is not None and p.at >= limit,
            self.serial.sleeping(sleep),
        )
        if not ended(self.journal, dispatch_id):
            raise WaitTimeout(
                f"dispatch {dispatch_id} not ended after {timeout:g} s; it goes on (`fellows-fsm status {dispatch_id}`)"
            )
        return result(self.journal, dispatch_id)[0]

    @serialized
    def watch(
        self, *, on_tick: Callable[[Progress], None] | None = None, sleep: Callable[[float], None] = time.sleep
    ) -> list[Handle]:
        """Block until every live dispatch of the journal is final; return the handles of every one it saw live.

        Driving: it drives them all. While another process drives: it follows read-only and takes over the
        lock when that process stops.
        """
        seen: dict[str, None] = {}

        def done() -> bool:
            live = [row.id for row in self.journal.dispatches(live_only=True)]
            seen.update(dict.fromkeys(live))
            if self._router is not None:
                seen.update(dict.fromkeys(self._router.driven))
                return not self._router.busy and not live
            return not live

        def tick(progress: Progress) -> bool:
            if on_tick is not None:
                on_tick(progress)
            return False

        self._loop(done, tick, self.serial.sleeping(sleep))
        return [self.handle(i) for i in seen]

    @serialized
    def poll(self) -> TickReport | None:
        """One poll of every live dispatch if this process can drive the journal; None while another drives it."""
        if not self.drive():
            return None
        assert self._router is not None
        return self._router.poll()

    @serialized
    def wait_for_handoffs(self) -> None:
        """While driving: block until every running handoff command has ended and is recorded (each is bounded by
        its lane's timeout). Does nothing while another process drives."""
        if self._router is not None:
            self._router.wait_for_handoffs()

    def _loop(self, done: Callable[[], bool], tick: Callable[[Progress], bool], sleep: Callable[[float], None]) -> None:
        """Drive (or follow read-only, trying the lock every poll interval) until ``done()`` or ``tick`` says stop."""
        if done():
            tick(Progress(self.clock.now(), self.driving, self._driver))
            return
        interval = self.config.fellows.poll_interval_seconds
        followed_another = False
        while not self.drive():
            followed_another = True
            self.journal.check_intact()  # a journal deleted under its followers: one line naming the live jobs
            if tick(Progress(self.clock.now(), False, self._driver)) or done():
                return
            sleep(interval)
        # After a takeover this process inherits the stopped driver's duty: every walking dispatch it recovered
        # is walked out (runs or ends within the ladder's worst case); pinned ones are driven but not waited for.
        inherited = [r.id for r in self.journal.dispatches(live_only=True) if not r.pinned] if followed_another else []
        self._run(lambda: done() and all(started_or_final(self.handle(i)) for i in inherited), tick, sleep)

    def _run(self, done: Callable[[], bool], tick: Callable[[Progress], bool], sleep: Callable[[float], None]) -> None:
        """Drive the router's own loop (its cadence and back-off) until ``done()`` or ``tick`` says stop."""
        router = self._router
        assert router is not None
        stop: list[bool] = []

        def on_tick(report: TickReport) -> None:
            if tick(Progress(self.clock.now(), True, None, report)):
                stop.append(True)

        router.run(until=lambda _: bool(stop) or done(), on_tick=on_tick, sleep=sleep)

    # ----------------------------------------------------------------- reading
    @serialized
    def handle(self, dispatch_id: str) -> Handle:
        """Where a dispatch stands, from the journal (ConfigError for an id the journal does not hold)."""
        handle = handle_of(self.journal, dispatch_id)
        if handle is None:
            raise ConfigError(f"dispatch {dispatch_id!r} is not in the journal {self.journal.path}")
        return handle

    @serialized
    def status(
        self, dispatch_id: str | None = None, *, live_only: bool = False, last: int | None = RECENT
    ) -> list[Handle]:
        """One dispatch (an id or a unique prefix of one), or the live ones and the ``last`` most recent (every
        one with ``last=None``), oldest first. Only reads the journal: safe while any process drives it."""
        return [Handle.from_row(row) for row in select(self.journal, dispatch_id, live_only=live_only, last=last)]

    @serialized
    def history(self, dispatch_id: str) -> list[HistoryEntry]:
        """Every transition of a dispatch as journaled, then its handoff and withdrawal, if any."""
        row = find(self.journal, dispatch_id)
        return history_entries(row, self.journal.steps(row.id), self.journal.jobs(row.id), self.journal.handoff(row.id))

    @serialized
    def paid_run(self, dispatch_id: str) -> PaidRun | None:
        """A dispatch's paid run (an id or a unique prefix), or None if it was never handed to a paid lane: its
        lane, ``status``, ``gpu_hours(now)`` and ``cost(now)`` so far, ``bound_gpu_hours`` and ``bound_cost`` (what
        its time limit lets it spend), ``live`` (it may still spend)."""
        return self.journal.paid_run(find(self.journal, dispatch_id).id)

    @serialized
    def budget_reason(self, dispatch_id: str) -> str | None:
        """Why the budget keeps a dispatch on its last free rung, or one pinned to a paid lane before its command
        (its last budget_wait step's note), or None if it is not waiting for the budget."""
        row = find(self.journal, dispatch_id)
        return budget_reason(self.journal.steps(row.id)) if waits_for_budget(row.outcome) else None

    @serialized
    def spend(self, now: float | None = None) -> Spend:
        """What the paid runs spent today, this week and this month (in the ``[budget]`` timezone), per lane and in
        all, and what the live ones may still add at worst (core/budget.py: ``Spend``), as of ``now`` (default:
        the clock). Only reads the journal."""
        return read_spend(self.journal, self.config.budget, self.clock.now() if now is None else now)

    @serialized
    def error(self, dispatch_id: str) -> FellowsError | None:
        """The error a finished dispatch ended with (a failed handoff, a refusal, a withdrawal, a pinned job that
        left the queue), or None if it is RUNNING, handed off, or still live."""
        return outcome_error(self.journal, find(self.journal, dispatch_id).id)

    @serialized
    def submit_many(self, specs: Sequence[JobSpec], *, intent: str = "prod", pin: str | None = None) -> list[Handle]:
        """Dispatch every spec, each checked first as ``submit`` checks it (one refused is raised, none journaled),
        in ONE inbox transaction; return their handles at once. The journal's driver (woken: driver/wake.py) makes
        their first submits in one batch, paced per cluster (``max_submits_per_second``)."""
        route = self.config.route(pin, intent)
        checks = [check_request(self.config, route, spec, **self._clusters()) for spec in specs]
        if refused := next((c.refused for c in checks if c.refused is not None), None):
            raise refused
        if self.background:
            remember_config(self.config, self.journal)
        requests = [(spec, c.ladder, c.note) for spec, c in zip(specs, checks, strict=True)]
        ids = enqueue_many(self.config, self.journal, requests, route, at=self.clock.now())
        if self.drive() and self._router is not None:
            self._router.nudge()  # this process drives: it makes the first submits now
        return [self.handle(i) for i in ids]

    # ----------------------------------------------------------------- cancelling
    @serialized
    def cancel(self, dispatch_id: str, *, wait: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> list[str]:
        """Withdraw a dispatch: journal it final (``withdrawn``) first, then scancel every job it got, whatever its
        state; return their ids (``Router.withdraw``). A dispatch handed to a command lane cannot be taken back
        (FellowsError): cancel it in that lane. The journal's driver does it, always through the inbox
        (driver/inbox.py): the cancel is journaled as a request and this waits up to ``wait`` seconds for the
        driver's answer; the driver is this process when it drives or can take the lock (not in background mode),
        else the process that holds the lock (the background driver is started if none runs)."""
        row = find(self.journal, dispatch_id)
        step = min(0.1, self.config.fellows.poll_interval_seconds)
        if self.background:
            offer_env(self.config, self.journal)  # a driver that cannot run scancel takes this shell's PATH
        return request_cancel(
            self.journal,
            row,
            at=self.clock.now(),
            step=step,
            wait=wait,
            ensure_driver=self._deliver,
            sleep=self.serial.sleeping(sleep),
        )

    def _deliver(self) -> None:
        """Have the journal's requests answered: by this process's router when it drives (or can), else by the
        journal's driver (the background one started if none runs)."""
        if self.drive():
            assert self._router is not None
            self._router.take_requests()
        elif not self.background:
            self.ensure_driver()
