"""The abacus kind: a paid lane whose "cloud" is a dict (``CLOUD``), so a test can walk a dispatch to it through the
real router and follow and cancel its job. It is what a new kind writes, and nothing more: its table, its lane,
and the kind the registry knows; no src file names it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs

from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.base import LaneSettings
from fellows_fsm.lanes.handoff import CompletedHandoff, Handoff, HandoffFiles, HandoffResult, Started
from fellows_fsm.scheduler.port import JobSpec

KIND = "abacus"
CLOUD: dict[str, PaidLook] = {}
"""The abacus's jobs by dispatch id, as the lane would report them (a dispatch missing here is GONE)."""
DELETED: list[str] = []
"""Every delete the lane was asked, in order."""


@attrs.frozen(kw_only=True)
class AbacusSettings:
    """``[lanes.<name>] kind = "abacus"``: a price, nothing else."""

    kind: ClassVar[str] = KIND
    walks_ladder: ClassVar[bool] = False
    follows: ClassVar[bool] = True
    queue_timeout_seconds: ClassVar[float | None] = None

    name: str
    price_per_gpu_hour: float
    manual_only: bool = False

    def check_reachable(self) -> None:
        """A dict is always reachable."""

    def shown(self) -> tuple[str, str, float | None]:
        """What the config view shows of it."""
        return ("(a abacus lane)", "", None)

    def warnings(self) -> tuple[str, ...]:
        """Nothing is ever wrong with a abacus."""
        return ()


@attrs.define
class AbacusLane:
    """The abacus lane: create / look / delete over ``CLOUD``."""

    settings: AbacusSettings
    kind: ClassVar[str] = KIND
    walks_ladder: ClassVar[bool] = False
    follows: ClassVar[bool] = True
    stops_at_limit: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """The lane's name."""
        return self.settings.name

    @property
    def manual_only(self) -> bool:
        """Whether it runs only when pinned."""
        return self.settings.manual_only

    @property
    def price_per_gpu_hour(self) -> float | None:
        """Its table's price."""
        return self.settings.price_per_gpu_hour

    @property
    def queue_timeout_seconds(self) -> float | None:
        """No bound."""
        return None

    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """What the handoff is, as journaled: the create of the dispatch's entry."""
        return ("abacus", "create", dispatch_id)

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """True once its entry exists."""
        return dispatch_id in CLOUD

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> Handoff:
        """Create the entry (once per dispatch, like a create by name), QUEUED."""
        CLOUD.setdefault(dispatch_id, PaidLook(PaidStatus.QUEUED))
        return CompletedHandoff(HandoffResult(self.command(dispatch_id, spec), 0, dispatch_id, ""))

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> Handoff | None:
        """After a restart: the create again, which finds the entry."""
        return self.start(dispatch_id, spec, files, now=was.at)

    def look(self, dispatch_ids: Sequence[str]) -> Mapping[str, PaidLook]:
        """Where each entry stands, in one call."""
        return {i: CLOUD.get(i, PaidLook(PaidStatus.GONE)) for i in dispatch_ids}

    def delete(self, dispatch_id: str) -> None:
        """Delete the entry."""
        DELETED.append(dispatch_id)
        CLOUD.pop(dispatch_id, None)


class AbacusKind:
    """The abacus kind as the registry knows it."""

    name = KIND

    def parse(self, name: str, table: Mapping[str, Any]) -> LaneSettings:
        """``price_per_gpu_hour`` (required), ``manual_only``."""
        price = table.get("price_per_gpu_hour")
        if not isinstance(price, int | float) or price <= 0:
            raise ConfigError(f"[lanes.{name}] price_per_gpu_hour={price!r} must be a number above 0")
        return AbacusSettings(name=name, price_per_gpu_hour=float(price), manual_only=table.get("manual_only", False))

    def table(self, settings: AbacusSettings) -> dict[str, Any]:
        """The table back."""
        return {"price_per_gpu_hour": settings.price_per_gpu_hour, "manual_only": settings.manual_only}

    def build(self, settings: AbacusSettings, *, state_dir: Path) -> AbacusLane:
        """The lane (no I/O)."""
        return AbacusLane(settings)
