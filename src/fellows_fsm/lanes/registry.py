"""The lane kinds by ``kind``, and the lanes of one config built through them.

A ``[lanes.<name>]`` table names its kind (``kind = "command"`` when it says none, so every config written before
kinds loads unchanged); the kind parses the rest of the table and builds the lane. A new kind is one folder in
lanes/ and two lines here (its import and its entry in ``KINDS``). ``[fellows]`` is the first SLURM lane. Nothing
here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.errors import ConfigError
from fellows_fsm.lanes.base import HandoffLane, LaneKind, LaneSettings
from fellows_fsm.lanes.command.lane import COMMAND
from fellows_fsm.lanes.gcp_batch.lane import GCP_BATCH
from fellows_fsm.lanes.slurm.lane import SLURM, SlurmLane, ladder_lane

if TYPE_CHECKING:
    from pathlib import Path

    from fellows_fsm.lanes.slurm.config import SlurmSettings
    from fellows_fsm.scheduler.port import Scheduler

__all__ = [
    "DEFAULT_KIND",
    "KINDS",
    "Lanes",
    "build_lanes",
    "fellows_table",
    "handoff_lane",
    "kind_of",
    "lane_table",
    "parse_fellows",
    "parse_lane",
]

KINDS: dict[str, LaneKind] = {
    COMMAND.name: COMMAND,
    SLURM.name: SLURM,
    GCP_BATCH.name: GCP_BATCH,
}
"""Every lane kind, by the ``kind`` a table names."""
DEFAULT_KIND = COMMAND.name
"""The kind of a ``[lanes.<name>]`` table that names none."""


def kind_of(name: str, table: Mapping[str, Any]) -> LaneKind:
    """The kind ``[lanes.<name>]`` names; ConfigError naming the lane and the key if it is not known."""
    kind = table.get("kind", DEFAULT_KIND)
    found = KINDS.get(kind) if isinstance(kind, str) else None
    if found is None:
        raise ConfigError(
            f"[lanes.{name}] kind={kind!r} is not a known lane kind; use one of {', '.join(sorted(KINDS))} "
            f"(or leave kind out: {DEFAULT_KIND!r})"
        )
    return found


def parse_lane(name: str, table: Mapping[str, Any]) -> LaneSettings:
    """The settings of ``[lanes.<name>]``, parsed by the kind it names."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"[lanes.{name}] must be a table")
    kind = kind_of(name, table)
    return kind.parse(name, {key: value for key, value in table.items() if key != "kind"})


def parse_fellows(table: Mapping[str, Any]) -> SlurmSettings:
    """The settings of ``[fellows]``: the first SLURM lane (its name is the ladder's lane), parsed by the slurm kind
    (no ``kind`` key: it is always SLURM)."""
    return SLURM.parse(LADDER_LANE, table)


def fellows_table(settings: SlurmSettings) -> dict[str, Any]:
    """The ``[fellows]`` table of ``settings``, which ``parse_fellows`` reads back."""
    return SLURM.table(settings)


def lane_table(settings: LaneSettings) -> dict[str, Any]:
    """The ``[lanes.<name>]`` table of ``settings`` (its ``kind`` and every key, None values left out), which
    ``parse_lane`` reads back."""
    values = KINDS[settings.kind].table(settings)
    return {"kind": settings.kind, **{key: value for key, value in values.items() if value is not None}}


@attrs.frozen
class Lanes:
    """The lanes of one config, built: the SLURM lanes a dispatch walks (fellows first), and the lanes it is handed
    to."""

    ladder: SlurmLane
    """The first SLURM lane (``[fellows]``)."""
    handoff: dict[str, HandoffLane]
    """The lanes a dispatch is handed to (or pinned to), by name."""
    slurm: dict[str, SlurmLane] = attrs.field(factory=dict)
    """Every SLURM lane, fellows first, by name: their ports are the driver's Clusters (driver/clusters.py)."""


class LanesConfig(Protocol):
    """What the lanes are built from (a Config has it all): the tables, the first SLURM lane's and every other's,
    and the state dir."""

    @property
    def lanes(self) -> tuple[LaneSettings, ...]: ...

    @property
    def fellows(self) -> SlurmSettings: ...

    @property
    def other_slurm_lanes(self) -> tuple[SlurmSettings, ...]: ...

    @property
    def state_dir(self) -> Path: ...


def build_lanes(
    config: LanesConfig,
    *,
    scheduler: Scheduler | None = None,
    handoff: Mapping[str, HandoffLane] | None = None,
    ports: Mapping[str, Scheduler] | None = None,
) -> Lanes:
    """Every lane of ``config``: the fellows lane on ``scheduler`` (else its real port), every other SLURM lane on
    ``ports[name]`` (else its real port: here with its slurm_conf, or over ssh to its host), and each other
    ``[lanes.<name>]`` built by its kind (``handoff`` replaces them: in-process lanes, in tests and the simulator)."""
    built: dict[str, HandoffLane] = {}
    if handoff is not None:
        built = dict(handoff)
    else:
        for settings in config.lanes:
            if not settings.walks_ladder:
                built[settings.name] = handoff_lane(settings, state_dir=config.state_dir)
    first = ladder_lane(config, scheduler)
    slurm = {first.name: first}
    for lane in config.other_slurm_lanes:
        port = (ports or {}).get(lane.name)
        slurm[lane.name] = SlurmLane(lane, port) if port is not None else SLURM.build(lane, state_dir=config.state_dir)
    return Lanes(first, built, slurm)


def handoff_lane(settings: LaneSettings, *, state_dir: Path) -> HandoffLane:
    """The lane a dispatch is handed to, built by its kind (again after a restart, from the journaled table)."""
    lane = KINDS[settings.kind].build(settings, state_dir=state_dir)
    if not isinstance(lane, HandoffLane):
        raise ConfigError(f"[lanes.{settings.name}] kind={settings.kind!r} builds no lane a job is handed to")
    return lane
