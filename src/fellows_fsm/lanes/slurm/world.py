"""What ``fellows-fsm config check`` asks one SLURM cluster (here, or over ssh): its client commands run, its
controller answers, each QoS of the lane's ladder exists there and is granted to the user, its partition exists and
its account is the user's. Each problem is one line naming the key, the value and the fix.

It reads only (``--version``, ``scontrol show partition``, ``sacctmgr show``); nothing is submitted or changed.
Bounded: the caller's port makes ONE attempt per command with a short timeout, and the first command the cluster
does not answer ends this lane's check (a hung controller or ssh costs one timeout, not one per command).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from fellows_fsm.errors import ConfigError, SchedulerError, SchedulerUnreachable
from fellows_fsm.slurm.accounting import Grants, check_lane, read_partitions
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import ONE_ATTEMPT

if TYPE_CHECKING:
    from fellows_fsm.lanes.slurm.config import SlurmSettings
    from fellows_fsm.scheduler.port import Scheduler

__all__ = ["SLURM_COMMANDS", "WORLD_TIMEOUT_SECONDS", "bounded", "cluster_problems"]

SLURM_COMMANDS = ("sbatch", "squeue", "scancel", "scontrol", "sacct", "sacctmgr")
"""Every SLURM client command a driver runs."""
WORLD_TIMEOUT_SECONDS = 10.0
"""How long one command of the check may take before its cluster counts as not answering."""


def bounded(scheduler: Scheduler, timeout_seconds: float = WORLD_TIMEOUT_SECONDS) -> Scheduler:
    """``scheduler`` with ONE attempt per command and ``timeout_seconds`` each (a real port; any other is returned
    as it is): the check waits out no back-off."""
    if isinstance(scheduler, SlurmScheduler):
        scheduler.runner.retry = ONE_ATTEMPT
        scheduler.runner.timeout_seconds = timeout_seconds
    return scheduler


def _table(lane: SlurmSettings) -> str:
    return "[fellows]" if lane.name == "fellows" else f"[lanes.{lane.name}]"


def _where(lane: SlurmSettings) -> str:
    if lane.host is not None:
        return f"{lane.host} (over ssh)"
    return f"the SLURM of slurm_conf={lane.slurm_conf}" if lane.slurm_conf else "the local SLURM"


def cluster_problems(lane: SlurmSettings, scheduler: Scheduler, read: Callable[[], Grants] | None) -> list[str]:
    """Every problem of ``lane``'s cluster, one line each (empty: it answers and grants the whole ladder).

    A real port is asked whether each command runs and whether the controller answers; ``read`` (what the cluster
    grants; None: nothing to read, as for a fake) judges the QoS, partition and account.
    """
    table, where = _table(lane), _where(lane)
    problems: list[str] = []
    partitions: frozenset[str] | None = None
    try:
        if isinstance(scheduler, SlurmScheduler):
            for name in SLURM_COMMANDS:
                try:
                    scheduler.runner.run((name, "--version"))
                except SchedulerUnreachable:
                    raise
                except SchedulerError as exc:
                    problems.append(f"{table} {where}: {exc}")
            if problems:
                return problems  # without its commands nothing more can be asked there
            partitions = read_partitions(scheduler.runner)  # the controller answers (sacctmgr asks slurmdbd only)
        if read is None:
            return problems
        grants = read()
    except SchedulerUnreachable as exc:
        fix = "host/ssh_options" if lane.host else "SLURM_CONF or slurm_conf"
        return [
            *problems,
            f"{table} {where} does not answer ({exc}); its rungs cannot be used until it does: fix {fix}, or take "
            "the lane out of [router] order",
        ]
    except SchedulerError as exc:
        return [*problems, f"{table} {where}: {exc}"]
    if partitions is not None:
        grants = attrs.evolve(grants, partitions=partitions)
    return problems + grant_problems(lane, grants)


def grant_problems(lane: SlurmSettings, grants: Grants) -> list[str]:
    """Each QoS of ``lane`` (its ladder and ``debug_qos``) that its cluster does not have or does not grant, and its
    partition and account if the cluster does not have them, one line each."""
    table, where, user = _table(lane), _where(lane), grants.user
    problems: list[str] = []
    if not grants.associations:
        problems.append(
            f"{table} user {user!r} has no association on {where}: no QoS is granted there; ask its admins to add "
            f"you (sacctmgr add user {user} account=...)"
        )
    known, granted = sorted(grants.qos), grants.granted
    keys = [("qos", lane.qos), *(("qos_ladder", q) for q in lane.qos_ladder)]
    if lane.debug_qos is not None:
        keys.append(("debug_qos", lane.debug_qos))
    for key, qos in keys:
        if qos not in grants.qos:
            problems.append(
                f"{table} {key}: QoS {qos!r} does not exist on {where} (its QoS: {', '.join(known) or 'none'}); "
                f"fix the name, or remove it from {key}"
            )
        elif qos not in granted and grants.associations:
            problems.append(
                f"{table} {key}: QoS {qos!r} is not granted to {user!r} on {where} (granted: "
                f"{', '.join(sorted(granted)) or 'none'}); remove it from {key}, or ask its admins to grant it "
                f"(sacctmgr modify user {user} set qos+={qos})"
            )
    for partition, account in ((lane.partition, None), (None, lane.account)):
        try:
            check_lane(table, grants, partition=partition, account=account)
        except ConfigError as exc:
            problems.append(str(exc))
    return problems
