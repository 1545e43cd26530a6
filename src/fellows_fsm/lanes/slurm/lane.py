"""The SLURM ladder lane kind (``slurm``): a ladder of QoS rungs on one SLURM cluster, the port its commands go
through, and the read of what that cluster grants (for the check before the first sbatch).

``[fellows]`` is the first SLURM lane, its table unchanged; a ``[lanes.<name>]`` table of this kind is another
cluster, with its own ladder, walked after fellows in ``[router] order`` (driver/clusters.py holds every SLURM lane's
port for the driver). Nothing here submits: the port is built, never called.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from fellows_fsm.core.ladder import Ladder
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.lanes.slurm.config import FELLOWS_ONLY, FellowsConfig
from fellows_fsm.scheduler.port import Scheduler
from fellows_fsm.slurm.accounting import Grants, discover, read_partitions
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner
from fellows_fsm.slurm.transport import LocalTransport, SshTransport

if TYPE_CHECKING:
    from pathlib import Path


__all__ = ["SLURM", "SlurmKind", "SlurmLane", "default_grants", "ladder_lane", "slurm_port", "slurm_scheduler"]


class _Where(Protocol):
    """What the port is built from: the first SLURM lane's table and the state dir (a Config has both)."""

    @property
    def fellows(self) -> FellowsConfig: ...

    @property
    def state_dir(self) -> Path: ...


def slurm_scheduler(config: _Where) -> SlurmScheduler:
    """The SLURM port for ``config``: the commands here, or on ``[fellows] host`` over one shared ssh master
    connection whose socket lives under ``<state_dir>/ssh``."""
    return slurm_port(config.fellows, config.state_dir)


def slurm_port(fellows: FellowsConfig, state_dir: Path) -> SlurmScheduler:
    """The SLURM port of one cluster's table: the commands here, or on its ``host`` over one shared ssh master
    connection whose socket lives under ``<state_dir>/ssh``."""
    if fellows.host is None:
        runner = CommandRunner(transport=LocalTransport(slurm_conf=fellows.slurm_conf))
        return SlurmScheduler(runner, options=fellows.render_options, submits_per_second=fellows.max_submits_per_second)
    transport = SshTransport(
        fellows.host,
        options=fellows.ssh_options,
        control_dir=state_dir / "ssh",
        connect_timeout_seconds=fellows.ssh_connect_timeout_seconds,
    )
    return SlurmScheduler(
        CommandRunner(transport=transport),
        remote_workdir=fellows.remote_workdir,
        options=fellows.render_options,
        submits_per_second=fellows.max_submits_per_second,
    )


def default_grants(scheduler: Scheduler) -> Callable[[], Grants] | None:
    """sacctmgr through the real port; None for any other port (nothing to read grants from)."""
    if isinstance(scheduler, SlurmScheduler):
        return lambda: discover(scheduler.runner, scheduler.user)
    return None


@attrs.frozen
class SlurmLane:
    """A SLURM cluster a dispatch walks the QoS ladder of: its settings and the one port to it."""

    config: FellowsConfig
    scheduler: Scheduler
    """The port every command for this cluster goes through (sbatch, squeue, scancel, sacctmgr, sacct)."""

    kind = FellowsConfig.kind
    walks_ladder = True
    manual_only = False

    @property
    def name(self) -> str:
        """The lane's name (``fellows`` for the ``[fellows]`` table)."""
        return self.config.name

    @property
    def settings(self) -> FellowsConfig:
        """What the lane was built from."""
        return self.config

    @property
    def grants_key(self) -> str:
        """Whose grants on which cluster (the port's user, and the ssh host or SLURM_CONF)."""
        user = str(getattr(self.scheduler, "user", "") or os.environ.get("USER", ""))
        return f"{user}@{self.config.host or os.environ.get('SLURM_CONF', '')}"

    def ladder_for(self, intent: str) -> Ladder:
        """The rungs a dispatch of ``intent`` walks (a debug one starts on ``debug_qos`` when set)."""
        return self.config.ladder_for(intent)

    def read_grants(self) -> Callable[[], Grants] | None:
        """sacctmgr through the real port (and, for a lane that sets ``partition``, the cluster's partitions);
        None for any other port (a fake has no grants to read)."""
        read = default_grants(self.scheduler)
        scheduler = self.scheduler
        if read is None or self.config.partition is None or not isinstance(scheduler, SlurmScheduler):
            return read
        return lambda: attrs.evolve(read(), partitions=read_partitions(scheduler.runner))

    @property
    def partition(self) -> str | None:
        """The partition the lane's jobs are queued in (None: the cluster's default)."""
        return self.config.partition

    @property
    def account(self) -> str | None:
        """The account the lane's jobs are charged to (None: the user's default there)."""
        return self.config.account


class LadderConfig(Protocol):
    """What the first SLURM lane is built from: its table and the state dir (a Config has both)."""

    @property
    def fellows(self) -> FellowsConfig: ...

    @property
    def state_dir(self) -> Path: ...


def ladder_lane(config: LadderConfig, scheduler: Scheduler | None = None) -> SlurmLane:
    """The first SLURM lane (``[fellows]``), on ``scheduler`` when given (a fake, in tests), else the real port
    (here, or over ssh to ``[fellows] host``)."""
    return SlurmLane(
        config.fellows, scheduler if scheduler is not None else slurm_port(config.fellows, config.state_dir)
    )


class SlurmKind:
    """The SLURM kind, as the registry knows it: the ``[fellows]`` table (FellowsConfig)."""

    name = FellowsConfig.kind

    def parse(self, name: str, table: Mapping[str, Any]) -> FellowsConfig:
        """The ``[fellows]`` table, or a ``[lanes.<name>]`` of this kind: another SLURM cluster with its own ladder."""
        return FellowsConfig.from_mapping(
            table, where="[fellows]" if name == LADDER_LANE else f"[lanes.{name}]", name=name
        )

    def table(self, settings: FellowsConfig) -> dict[str, Any]:
        """Every key of the lane's table (None values left out; its name is the table's)."""
        return {
            f.name: list(value) if isinstance(value, tuple) else value
            for f in attrs.fields(FellowsConfig)
            if f.name != "name"
            and (settings.name == LADDER_LANE or f.name not in FELLOWS_ONLY)
            and (value := getattr(settings, f.name)) is not None
        }

    def build(self, settings: FellowsConfig, *, state_dir: Path) -> SlurmLane:
        """The lane on the real port to its cluster (an ssh master's socket under ``state_dir``)."""
        return SlurmLane(settings, slurm_port(settings, state_dir))


SLURM = SlurmKind()
"""The SLURM kind's entry in lanes/registry.py."""
