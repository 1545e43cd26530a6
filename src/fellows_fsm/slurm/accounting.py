"""Discover what the cluster grants a user (sacctmgr) and check a QoS ladder against it before any submit.

It reads accounting once and judges the ladder from those values; it never changes accounting, never
submits, and never guesses a limit it could not read (an unreadable limit is treated as no limit).
SLURM's field values are parsed in scheduler/fields.py, the cluster's workload read in slurm/workload.py; their
names are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import attrs

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.errors import ConfigError, SchedulerError
from fellows_fsm.scheduler.fields import gpu_count, parse_duration
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.slurm.runner import CommandRunner

__all__ = [
    "ASSOC_FIELDS",
    "QOS_FIELDS",
    "Association",
    "Grants",
    "LadderCheck",
    "QosInfo",
    "SkippedRung",
    "check_ladder",
    "check_lane",
    "discover",
    "parse_assoc",
    "parse_qos",
    "read_partitions",
]

log = logging.getLogger(__name__)

ASSOC_FIELDS = "Cluster,Account,User,Partition,QOS,DefaultQOS,GrpTRES"
QOS_FIELDS = "Name,Priority,MaxWall,MaxTRESPU,GrpTRES,Flags"


@attrs.frozen
class QosInfo:
    """One QoS's limits as sacctmgr reports them."""

    name: str
    priority: int = 0
    max_wall_seconds: int | None = None
    max_gpus_per_user: int | None = None
    grp_gpus: int | None = None
    """A GPU cap shared by every job of the QoS (all users)."""
    flags: frozenset[str] = frozenset()


@attrs.frozen
class Association:
    """One user association: the account (and partition) it is for, the QoS it grants, its own GPU cap."""

    cluster: str
    account: str
    user: str
    partition: str
    qos: frozenset[str]
    default_qos: str | None
    grp_gpus: int | None = None


@attrs.frozen
class Grants:
    """What the cluster grants a user: its associations and every QoS's limits."""

    user: str
    associations: tuple[Association, ...]
    qos: Mapping[str, QosInfo]
    partitions: frozenset[str] | None = None
    """The cluster's partitions, when read (a lane that sets ``partition``); None: not read."""

    @property
    def granted(self) -> frozenset[str]:
        """Every QoS name granted by any of the user's associations."""
        names: set[str] = set()
        for assoc in self.associations:
            names |= assoc.qos
        return frozenset(names)


@attrs.frozen
class SkippedRung:
    """A rung the job can never start on, and why."""

    rung: Rung
    why: str


@attrs.frozen
class LadderCheck:
    """The ladder judged against the grants: the rungs kept, those skipped (with why), and warnings."""

    rungs: tuple[Rung, ...]
    skipped: tuple[SkippedRung, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def messages(self) -> tuple[str, ...]:
        """Every user-facing line: each skip with its reason, then each warning."""
        return tuple(s.why for s in self.skipped) + self.warnings

    @property
    def ladder(self) -> Ladder:
        """The kept rungs as a ladder (re-indexed, caps kept); ConfigError if no rung is left."""
        if not self.rungs:
            raise ConfigError(
                "no rung of the QoS ladder can ever start this job: " + "; ".join(s.why for s in self.skipped)
            )
        return Ladder(tuple(attrs.evolve(r, index=i) for i, r in enumerate(self.rungs)))  # (each keeps its lane)


def _int_or_zero(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0


def parse_qos(stdout: str) -> dict[str, QosInfo]:
    """Parse ``sacctmgr -P -n show qos format=QOS_FIELDS``."""
    found: dict[str, QosInfo] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 6:
            log.warning("sacctmgr show qos: ignoring %r", line)
            continue
        name, priority, max_wall, max_tres_pu, grp_tres, flags = (p.strip() for p in parts[:6])
        found[name] = QosInfo(
            name=name,
            priority=_int_or_zero(priority),
            max_wall_seconds=parse_duration(max_wall),
            max_gpus_per_user=gpu_count(max_tres_pu),
            grp_gpus=gpu_count(grp_tres),
            flags=frozenset(f for f in flags.split(",") if f),
        )
    return found


def parse_assoc(stdout: str) -> tuple[Association, ...]:
    """Parse ``sacctmgr -P -n show assoc format=ASSOC_FIELDS`` (user rows only)."""
    found: list[Association] = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 7:
            log.warning("sacctmgr show assoc: ignoring %r", line)
            continue
        cluster, account, user, partition, qos, default_qos, grp_tres = (p.strip() for p in parts[:7])
        if not user:
            continue
        found.append(
            Association(
                cluster=cluster,
                account=account,
                user=user,
                partition=partition,
                qos=frozenset(q for q in qos.split(",") if q),
                default_qos=default_qos or None,
                grp_gpus=gpu_count(grp_tres),
            )
        )
    return tuple(found)


def discover(runner: CommandRunner, user: str) -> Grants:
    """Read ``user``'s associations and every QoS's limits (two sacctmgr calls)."""
    assoc = runner.run(("sacctmgr", "-P", "-n", "show", "assoc", "where", f"user={user}", f"format={ASSOC_FIELDS}"))
    if not assoc.ok:
        raise SchedulerError(f"sacctmgr could not list the associations of user {user!r}: {assoc.message}")
    qos = runner.run(("sacctmgr", "-P", "-n", "show", "qos", f"format={QOS_FIELDS}"))
    if not qos.ok:
        raise SchedulerError(f"sacctmgr could not list the QoS: {qos.message}")
    return Grants(user=user, associations=parse_assoc(assoc.stdout), qos=parse_qos(qos.stdout))


def read_partitions(runner: CommandRunner) -> frozenset[str]:
    """The cluster's partition names (``scontrol -o show partition``: one line each)."""
    found = runner.run(("scontrol", "-o", "show", "partition"))
    if not found.ok:
        raise SchedulerError(f"scontrol could not list the partitions: {found.message}")
    names = (word.removeprefix("PartitionName=") for line in found.stdout.splitlines() for word in line.split()[:1])
    return frozenset(n for n in names if n)


def check_lane(where: str, grants: Grants, *, partition: str | None, account: str | None) -> None:
    """A lane's partition and account against what its cluster has: ConfigError naming ``where`` and the key."""
    accounts = sorted({a.account for a in grants.associations})
    if account is not None and accounts and account not in accounts:
        raise ConfigError(
            f"{where} account={account!r} is not an account of user {grants.user!r} on that cluster (theirs: "
            f"{', '.join(accounts)}); fix account, or remove it to use the default"
        )
    if partition is not None and grants.partitions is not None and partition not in grants.partitions:
        raise ConfigError(
            f"{where} partition={partition!r} does not exist on that cluster (its partitions: "
            f"{', '.join(sorted(grants.partitions)) or 'none'}); fix partition, or remove it to use the default"
        )


def _hms(seconds: int) -> str:
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def check_ladder(ladder: Ladder, grants: Grants, spec: JobSpec, *, where: str = "[fellows]") -> LadderCheck:
    """Judge each rung for ``spec``: refuse ungranted QoS, skip rungs that never fit it, warn on shared caps.

    Raises ConfigError naming the first ungranted QoS and listing the granted ones (``where``: the lane's table).
    """
    granted = grants.granted
    for rung in ladder.rungs:
        if grants.qos and rung.qos not in grants.qos:
            known = ", ".join(sorted(grants.qos))
            raise ConfigError(
                f"QoS {rung.qos!r} in the ladder {list(ladder.qos_names)!r} does not exist on this cluster "
                f"(its QoS: {known}); fix the name in {where} or remove it"
            )
        if rung.qos not in granted:
            listed = ", ".join(sorted(granted)) or "none"
            raise ConfigError(
                f"QoS {rung.qos!r} in the ladder {list(ladder.qos_names)!r} is not granted to user "
                f"{grants.user!r} (granted: {listed}); remove it from {where} or ask an admin to grant it"
            )
    kept: list[Rung] = []
    skipped: list[SkippedRung] = []
    warnings: list[str] = []
    for rung in ladder.rungs:
        info = grants.qos.get(rung.qos, QosInfo(rung.qos))
        why = _never_fits(info, spec)
        if why is not None:
            skipped.append(SkippedRung(rung, f"skipping {rung.qos}: {why}"))
            continue
        kept.append(rung)
        if info.grp_gpus is not None:
            warnings.append(
                f"{rung.qos} has a group GPU cap (GrpTRES gres/gpu={info.grp_gpus}) shared by every user of "
                "it: its pending reasons may not clear when your own jobs end"
            )
    shared = sorted({a.grp_gpus for a in grants.associations if a.grp_gpus is not None})
    if shared and len(kept) > 1:
        warnings.append(
            f"user {grants.user!r} has an association GPU cap (GrpTRES gres/gpu={shared[0]}) that every rung "
            "shares: walking the ladder does not free GPUs under that cap"
        )
    return LadderCheck(tuple(kept), tuple(skipped), tuple(warnings))


def _never_fits(info: QosInfo, spec: JobSpec) -> str | None:
    """Why ``spec`` can never start under ``info``'s per-job and per-user limits, or None."""
    if (
        spec.time_limit_seconds is not None
        and info.max_wall_seconds is not None
        and spec.time_limit_seconds > info.max_wall_seconds
    ):
        return (
            f"the job's --time {_hms(spec.time_limit_seconds)} is over its MaxWall "
            f"{_hms(info.max_wall_seconds)}, so it would pend forever (QOSMaxWallDurationPerJobLimit)"
        )
    if info.max_gpus_per_user is not None and spec.gpus > info.max_gpus_per_user:
        return (
            f"the job asks for {spec.gpus} GPU{'s' if spec.gpus != 1 else ''}, over its per-user cap of "
            f"{info.max_gpus_per_user} "
            "(MaxTRESPerUser gres/gpu), so it would pend forever (QOSMaxGRESPerUser)"
        )
    if info.grp_gpus is not None and spec.gpus > info.grp_gpus:
        return (
            f"the job asks for {spec.gpus} GPU{'s' if spec.gpus != 1 else ''}, over its group cap of "
            f"{info.grp_gpus} (GrpTRES gres/gpu), "
            "so it would pend forever"
        )
    return None
