"""Drive one dispatch by hand, through the production driver: for tests and for trying the machine out.

``Driven(Dispatch(...), FakeScheduler())`` runs what the core decides exactly as a router tick does (the journal
effects first, the port calls after, one batched cancel); ``fellows_fsm.FakeScheduler`` is the shipped fake port.
"""

from __future__ import annotations

from typing import Any

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.core import TRIGGERS, Dispatch
from fellows_fsm.driver import Driver, Recorder
from fellows_fsm.scheduler import History, Observation, Scheduler

__all__ = ["Driven"]


class Driven:
    """One Dispatch driven by the production Driver (the doer the router runs) on a port, one event at a time.

    Attributes read through to the Dispatch; ``submit()``, ``advance(obs)`` and the trigger names run what the
    core decides through the same effect path as a router tick (journal first, one batched cancel call).
    """

    def __init__(
        self, dispatch: Dispatch, scheduler: Scheduler, recorder: Recorder | None = None, clock: Clock | None = None
    ) -> None:
        self.__dict__["d"] = dispatch
        self.__dict__["driver"] = Driver(scheduler, recorder, clock or SystemClock())

    def __getattr__(self, name: str) -> Any:
        if name in TRIGGERS:
            return lambda: self.driver._run(self.d, self.d.fire(name, self.driver.clock.now()))
        return getattr(self.d, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.d, name, value)

    def submit(self) -> None:
        """The first submit, as Router.dispatch makes it."""
        self.driver.start(self.d)

    def advance(
        self, observation: Observation | None, *, may_change_rung: bool = True, history: History | None = None
    ) -> None:
        """One router tick with this observation of the job (None: no new look) and, for ``park_early =
        "calibrated"``, the cluster's history; a refused first submit raises."""
        job_id = self.d.job_id
        observations = {job_id: observation} if observation is not None and job_id is not None else {}
        outcome = self.driver.tick([self.d], observations, 1 if may_change_rung else 0, park_budget=1, history=history)
        if outcome.rejected:
            raise outcome.rejected[0][1]
