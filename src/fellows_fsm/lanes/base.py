"""The lane seam: what the driver asks of any lane, and what a lane kind gives the registry (registry.py).

A lane is a place a job can run, one ``[lanes.<name>]`` table (``[fellows]`` for the first SLURM ladder), of one
kind: one folder in lanes/ (slurm/: a ladder on a SLURM cluster; command/: one command run once; gcp_batch/: a
GCP Batch job). Code that asks "is this the ladder?", "is it followed?" or "what does it cost?" asks the lane's
table what it can do (``LaneSettings``) and the config's order, never a lane's name or kind. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from fellows_fsm.core.ladder import Ladder
    from fellows_fsm.core.paid import PaidLook
    from fellows_fsm.lanes.handoff import Handoff, HandoffFiles, LogsWay, Started
    from fellows_fsm.scheduler.port import JobSpec, Scheduler
    from fellows_fsm.slurm.accounting import Grants

__all__ = ["HandoffLane", "LadderLane", "Lane", "LaneFace", "LaneKind", "LaneSettings", "PaidLane", "ShowsLogs"]


class LaneFace(Protocol):
    """What a lane's table and its built lane both say: its name, its kind, and whether a dispatch walks it."""

    @property
    def name(self) -> str:
        """The lane's name, as used by ``--pin`` and ``[router] order``."""
        ...

    @property
    def kind(self) -> str:
        """The registry's key of the lane's kind (``[lanes.<name>] kind``)."""
        ...

    @property
    def manual_only(self) -> bool:
        """True if the lane runs only when a dispatch is pinned to it."""
        ...

    @property
    def walks_ladder(self) -> bool:
        """True for a lane whose rungs a dispatch walks (SLURM), False for one a dispatch is handed to."""
        ...


class LaneSettings(LaneFace, Protocol):
    """A lane's table as its kind parsed it (a frozen value), and what it can do, as plain values: enough for the
    config to check the order, the admission to check a submit, and the views to show it."""

    @property
    def follows(self) -> bool:
        """True if the lane's jobs are followed to their end (a SLURM lane, a paid lane); False for a lane whose
        handoff is final (a command lane without ``status``)."""
        ...

    @property
    def price_per_gpu_hour(self) -> float | None:
        """What one GPU-hour costs on this lane, in the user's currency (None: free, or no price configured)."""
        ...

    @property
    def queue_timeout_seconds(self) -> float | None:
        """How long a handed-off job may sit queued before it is deleted (None: no bound, or not handed off)."""
        ...

    def check_reachable(self) -> None:
        """Raise a LaneError (one line, saying how to fix it) when this lane cannot be used from here (no
        credentials, a library missing); nothing is sent anywhere."""
        ...

    def shown(self) -> tuple[str, str, float | None]:
        """What ``fellows-fsm config`` shows of a lane a dispatch is handed to: what it runs, how it is probed
        ("" for nothing to show), and how long its handoff may take (None: not shown)."""
        ...

    def warnings(self) -> tuple[str, ...]:
        """What is allowed in the table but probably wrong here (a program not on PATH), one line each."""
        ...


class Lane(LaneFace, Protocol):
    """What the driver needs to know of any lane, built from its settings."""

    @property
    def settings(self) -> LaneSettings:
        """What the lane was built from."""
        ...


@runtime_checkable
class HandoffLane(Lane, Protocol):
    """A lane a dispatch is handed to by one command started once (driver/handoffs.py runs it)."""

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """What the handoff is, in words, as journaled and shown (a command lane: its argv; another kind: what it
        asks of its service, e.g. the create of the job it names)."""
        ...

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True if the lane already has this dispatch's job, False if it surely has not, None if unknowable."""
        ...

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Hand the dispatch's job to the lane (its step already journaled) and return at once; ``files`` are
        where the handoff may keep its output (prepared by the driver)."""
        ...

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """The handoff a previous driver started (``was``: what it was, as ``command`` said then, its process if it
        ran as one, when), if it can still be followed."""
        ...


@runtime_checkable
class ShowsLogs(Protocol):
    """A lane that can say how its jobs' logs are shown (``fellows-fsm logs``); a kind without it: the command says
    the lane cannot show them."""

    def logs(self, dispatch_id: str, spec: JobSpec | None) -> LogsWay:
        """How the dispatch's job's logs are shown: an argv to run, or one line saying where they are."""
        ...


@runtime_checkable
class PaidLane(HandoffLane, Protocol):
    """A lane whose job is followed after the handoff until it ends, cancelled by ``cancel``, and counted against
    the budget (a GCP Batch lane; a command lane with ``status`` and ``cancel`` templates). The driver calls ``look``
    at most once per poll interval for all of the lane's live paid jobs, and ``delete`` once per cancel."""

    @property
    def follows(self) -> bool:
        """True if its jobs can be followed (False: a command lane with no ``status``: handed off is final)."""
        ...

    @property
    def price_per_gpu_hour(self) -> float | None:
        """What one GPU-hour costs on this lane, in the user's currency (None: no price configured)."""
        ...

    @property
    def queue_timeout_seconds(self) -> float | None:
        """How long a paid job may sit queued before it is deleted and the dispatch ends PAID_FAILED (None: no
        bound)."""
        ...

    @property
    def stops_at_limit(self) -> bool:
        """True if the lane itself ends a job at its time limit (Batch's maxRunDuration): the driver then deletes one
        that still runs only after two polls of grace; else it deletes it one poll before its limit, so the run
        never passes the bound it was handed off with."""
        ...

    def look(self, dispatch_ids: Sequence[str]) -> Mapping[str, PaidLook]:
        """Where each of these dispatches' paid jobs stands, in ONE round trip for the lane (one list call). A
        dispatch missing from the answer could not be told (asked again next poll). Raises a LaneError (one
        line) when the lane could not be asked at all."""
        ...

    def delete(self, dispatch_id: str) -> None:
        """Cancel (delete) the dispatch's paid job; returns once the lane has accepted it or the job is already
        gone; raises a LaneError (one line) if not."""
        ...


class LadderLane(Lane, Protocol):
    """A lane whose QoS rungs a dispatch walks: it owns the scheduler port and the check of its grants."""

    @property
    def scheduler(self) -> Scheduler:
        """The port every command for this lane's cluster goes through."""
        ...

    @property
    def grants_key(self) -> str:
        """Whose grants on which cluster: a cached read for another never answers."""
        ...

    def ladder_for(self, intent: str) -> Ladder:
        """The rungs a dispatch of ``intent`` walks."""
        ...

    @property
    def partition(self) -> str | None:
        """The partition the lane's jobs are queued in (None: the cluster's default): checked against its cluster."""
        ...

    @property
    def account(self) -> str | None:
        """The account the lane's jobs are charged to (None: the user's default there)."""
        ...

    def read_grants(self) -> Callable[[], Grants] | None:
        """How to read what the cluster grants (sacctmgr), or None when the port has nothing to read them from."""
        ...


class LaneKind(Protocol):
    """One lane kind, as the registry knows it: it parses its own table and builds its lane."""

    @property
    def name(self) -> str:
        """The kind's key in the registry (``kind = "..."``)."""
        ...

    def parse(self, name: str, table: Mapping[str, Any]) -> LaneSettings:
        """The settings of ``[lanes.<name>]`` (``kind`` already taken out); ConfigError naming the key if bad."""
        ...

    def table(self, settings: Any) -> dict[str, Any]:
        """The inverse of ``parse``: every key of the table, defaults resolved (what the journal keeps)."""
        ...

    def build(self, settings: Any, *, state_dir: Path) -> Lane:
        """The lane for ``settings``; ``state_dir`` is where a lane keeps its files (an ssh socket, ...). No I/O."""
        ...
