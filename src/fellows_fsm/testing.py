"""First-class fakes for tests: drive one dispatch by hand through the production driver, and answer SLURM
commands from a function.

``Driven(Dispatch(...), FakeScheduler())`` runs what the core decides exactly as a router tick does (the journal
effects first, the port calls after, one batched cancel); ``fellows_fsm.FakeScheduler`` is the shipped fake port.
``MockTransport(handler)`` is the transport under the real SLURM port (httpx's pattern): ``handler(request)``
returns a ``Reply`` or raises what a transport raises (``NoAnswer``, ``SshLoginRefused``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.core import TRIGGERS, Dispatch
from fellows_fsm.driver import Driver, Recorder
from fellows_fsm.scheduler import Observation, Scheduler
from fellows_fsm.slurm.transport import NoAnswer, Reply, Request

__all__ = ["Driven", "MockTransport", "NoAnswer", "Reply", "Request"]


class MockTransport:
    """A transport that answers every request with ``handler(request)``; ``requests`` records them in order.

    ``remote=True`` makes the port behave as over ssh (the script's content sent on stdin).
    """

    def __init__(self, handler: Callable[[Request], Reply], *, remote: bool = False) -> None:
        self.handler = handler
        self.remote = remote
        self.where = "in a MockTransport"
        self.reach_hint = "check the MockTransport's handler"
        self.peer = "the MockTransport"
        self.requests: list[Request] = []

    def run(self, request: Request) -> Reply:
        """Record ``request`` and return the handler's reply (or let its exception through)."""
        self.requests.append(request)
        return self.handler(request)


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

    def advance(self, observation: Observation | None, *, may_change_rung: bool = True) -> None:
        """One router tick with this observation of the job (None: no new look); a refused first submit raises."""
        job_id = self.d.job_id
        observations = {job_id: observation} if observation is not None and job_id is not None else {}
        outcome = self.driver.tick([self.d], observations, 1 if may_change_rung else 0, park_budget=1)
        if outcome.rejected:
            raise outcome.rejected[0][1]
