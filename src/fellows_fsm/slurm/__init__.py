"""The real SLURM port: command runner, sbatch rendering, batched observation, accounting discovery.

It turns port calls into SLURM commands (argv lists, machine formats) and their output into Observations
and errors; it never knows the lifecycle's states and never decides a transition.
"""

from __future__ import annotations

from fellows_fsm.slurm.accounting import Association, Grants, LadderCheck, QosInfo, SkippedRung, check_ladder, discover
from fellows_fsm.slurm.observe import Observer
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.render import SbatchCommand, render_sbatch
from fellows_fsm.slurm.runner import CommandResult, CommandRunner, RetryPolicy
from fellows_fsm.slurm.transport import LocalTransport, SshTransport, Transport

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
]
