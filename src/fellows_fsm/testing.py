"""First-class helpers for tests: drive one dispatch by hand through the production executor, or a journal's
driver in a thread.

``Driven(Dispatch(...), FakeScheduler())`` runs what the core decides exactly as a router tick does (the journal
effects first, the port calls after, one batched cancel); ``fellows_fsm.FakeScheduler`` is the shipped fake port.
The mock transport under the real SLURM port is slurm/mock.py (``MockTransport``, ``MockRunner``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.lifecycle import TRIGGERS
from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.executor import Executor, Recorder
from fellows_fsm.driver.inbox import has_work
from fellows_fsm.driver.process import serve
from fellows_fsm.errors import PaidLaneError
from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.handoff import CompletedHandoff, Handoff, HandoffFiles, HandoffResult, Started
from fellows_fsm.scheduler.port import JobSpec, Observation, Scheduler, Workload

__all__ = ["Driven", "FakePaidLane", "ThreadedDriver"]


class Driven:
    """One Dispatch driven by the production Executor (the doer the router runs) on a port, one event at a time.

    Attributes read through to the Dispatch; ``submit()``, ``advance(obs)`` and the trigger names run what the
    core decides through the same effect path as a router tick (journal first, one batched cancel call).
    """

    def __init__(
        self, dispatch: Dispatch, scheduler: Scheduler, recorder: Recorder | None = None, clock: Clock | None = None
    ) -> None:
        self.__dict__["d"] = dispatch
        self.__dict__["executor"] = Executor(scheduler, recorder, clock or SystemClock())

    def __getattr__(self, name: str) -> Any:
        if name in TRIGGERS:
            return lambda: self.executor._run(self.d, self.d.fire(name, self.executor.clock.now()))
        return getattr(self.d, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.d, name, value)

    def submit(self) -> None:
        """The first submit, as Router.dispatch makes it."""
        self.executor.start(self.d)

    def advance(
        self, observation: Observation | None, *, may_change_rung: bool = True, workload: Workload | None = None
    ) -> None:
        """One router tick with this observation of the job (None: no new look) and, for ``park_early =
        "calibrated"``, the cluster's workload; a refused first submit raises."""
        job_id = self.d.job_id
        observations = {job_id: observation} if observation is not None and job_id is not None else {}
        outcome = self.executor.tick(
            [self.d], observations, 1 if may_change_rung else 0, max_parks=1, workload=workload
        )
        if outcome.rejected:
            raise outcome.rejected[0][1]


class ThreadedDriver:
    """The background driver in a thread of this process, on any port: a test's stand-in for ``ensure_driver``.

    Call it as ``ensure_driver`` is called (``(config, journal)``): it starts ``daemon.serve`` in a thread when
    the journal has work and no driver holds its lock, and returns the owner record (else None). ``close()``
    stops every driver it started (each finishes the tick in hand) and waits for them.
    """

    def __init__(self, scheduler: Scheduler, *, clock: Clock | None = None) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.started = 0
        """How many drivers it started (a test of "one driver" counts these)."""
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __call__(self, config: Config, journal: Journal | None = None) -> DriverOwner | None:
        with self._lock:
            path = config.journal_path
            reader = journal if journal is not None else Journal(path, readonly=True)
            try:
                if reader.driver_alive() or not has_work(reader):
                    return None
            finally:
                if journal is None:
                    reader.close()
            asked = (self.clock or SystemClock()).now()
            thread = threading.Thread(
                target=serve,
                args=(config, self.scheduler),
                kwargs={"clock": self.clock, "stop_event": self._stop, "kind": "background"},
                name=f"driver-{self.started}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
            self.started += 1
            lock = path.with_name(path.name + ".lock")
            while True:  # until its record is in the lock file (it stays there once it lets go), or it ended
                owner = DriverOwner.parse(lock.read_text(encoding="utf-8")) if lock.exists() else None
                if owner is not None and owner.kind == "background" and owner.since >= asked:
                    return owner
                if not thread.is_alive():
                    return None  # it found another driver, or nothing to do
                time.sleep(0.005)

    def close(self) -> None:
        """Stop every driver started here and wait for them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads, self._stop = [], threading.Event()  # a later call starts a driver again


# ----------------------------------------------------------------------------------------------- MockRunner


@attrs.define(eq=False)
class FakePaidLane:
    """A paid lane in memory (lanes/base.py ``PaidLane``) for fast unit tests: a handoff makes its job at once
    (QUEUED; made once per dispatch id, like a create by name), the test moves it (``move``), and every look and
    delete is recorded. ``settings`` is the lane's table (a command lane's ``CommandSettings`` will do)."""

    settings: LaneSettings
    price_per_gpu_hour: float | None = 2.0
    queue_timeout_seconds: float | None = None
    follows: bool = True
    stops_at_limit: bool = False
    """Does the lane end a job at its time limit itself (as Batch does)? The fake never does: the test moves it."""
    jobs: dict[str, PaidLook] = attrs.field(factory=dict)
    """Each dispatch's paid job as the lane would report it (a dispatch missing here is GONE)."""
    created: list[str] = attrs.field(factory=list)
    looks: list[tuple[str, ...]] = attrs.field(factory=list)
    deleted: list[str] = attrs.field(factory=list)
    unavailable: bool = False
    """Every look raises PaidLaneError (the lane's API does not answer)."""
    refuse_deletes: int = 0
    """So many deletes raise PaidLaneError before one is taken."""
    die_after_create: bool = False
    """The driver dies (SystemExit) right after the create call made the job, before its answer is journaled."""

    kind = "fake-paid"
    walks_ladder = False

    @property
    def name(self) -> str:
        """The lane's name."""
        return self.settings.name

    @property
    def manual_only(self) -> bool:
        """Whether it runs only when pinned."""
        return self.settings.manual_only

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """What the handoff is (journaled): the create of the job named after the dispatch."""
        return ("fake-paid", "create", f"fsm-{dispatch_id}")

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True once its job was made."""
        return dispatch_id in self.created

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Make the job (once per dispatch: a second create by the same name finds the first)."""
        argv = self.command(dispatch_id, spec)
        if dispatch_id not in self.created:
            self.created.append(dispatch_id)
            self.jobs[dispatch_id] = PaidLook(PaidStatus.QUEUED)
        if self.die_after_create:
            raise SystemExit(f"killed right after the create of fsm-{dispatch_id}")
        return CompletedHandoff(HandoffResult(argv, 0, argv[-1], ""))

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """After a crash: the create again, which finds the job if it was made."""
        return self.start(dispatch_id, spec, files, now=was.at)

    def look(self, dispatch_ids: Sequence[str]) -> Mapping[str, PaidLook]:
        """Where each job stands, in one call (recorded)."""
        self.looks.append(tuple(dispatch_ids))
        if self.unavailable:
            raise PaidLaneError("the fake paid lane does not answer (HTTP 503)")
        return {i: self.jobs.get(i, PaidLook(PaidStatus.GONE)) for i in dispatch_ids}

    def delete(self, dispatch_id: str) -> None:
        """Delete the job (recorded); one the fake was told to refuse raises PaidLaneError."""
        self.deleted.append(dispatch_id)
        if self.refuse_deletes:
            self.refuse_deletes -= 1
            raise PaidLaneError("the fake paid lane refused the delete (HTTP 500)")
        self.jobs.pop(dispatch_id, None)

    def move(self, dispatch_id: str, status: PaidStatus, note: str = "", run_seconds: float | None = None) -> None:
        """The test moves a paid job (someone else's delete: ``status=GONE``)."""
        if status == PaidStatus.GONE:
            self.jobs.pop(dispatch_id, None)
        else:
            self.jobs[dispatch_id] = PaidLook(status, note, run_seconds)
