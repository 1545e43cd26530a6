"""The real SLURM port: command runner, sbatch rendering, batched observation, accounting discovery.

It turns port calls into SLURM commands (argv lists, machine formats) and their output into Observations
and errors; it never knows the lifecycle's states and never decides a transition.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fellows_fsm.slurm.accounting import Association, Grants, LadderCheck, QosInfo, SkippedRung, check_ladder, discover
from fellows_fsm.slurm.observe import Observer
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.render import SbatchCommand, render_sbatch
from fellows_fsm.slurm.runner import CommandResult, CommandRunner, RetryPolicy
from fellows_fsm.slurm.transport import LocalTransport, SshTransport, Transport

if TYPE_CHECKING:
    from fellows_fsm.lanes.slurm.config import FellowsConfig


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


__all__ = [
    "Association",
    "CommandResult",
    "CommandRunner",
    "Grants",
    "LadderCheck",
    "LocalTransport",
    "Observer",
    "QosInfo",
    "RetryPolicy",
    "SbatchCommand",
    "SkippedRung",
    "SlurmScheduler",
    "SshTransport",
    "Transport",
    "check_ladder",
    "discover",
    "render_sbatch",
    "slurm_port",
    "slurm_scheduler",
]
