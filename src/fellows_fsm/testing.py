"""First-class helpers for tests: drive one dispatch by hand through the production executor, or a journal's
driver in a thread.

``Driven(Dispatch(...), FakeScheduler())`` runs what the core decides exactly as a router tick does (the journal
effects first, the port calls after, one batched cancel); ``fellows_fsm.FakeScheduler`` is the shipped fake port.
The mock transport under the real SLURM port is slurm/mock.py (``MockTransport``, ``MockRunner``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.lifecycle import TRIGGERS
from fellows_fsm.driver.executor import Executor, Recorder
from fellows_fsm.driver.inbox import has_work
from fellows_fsm.driver.process import serve
from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.port import Observation, Scheduler, Workload

__all__ = ["Driven", "ThreadedDriver"]


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
            [self.d], observations, 1 if may_change_rung else 0, park_budget=1, workload=workload
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
