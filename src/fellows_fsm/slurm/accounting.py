"""Discover what the cluster grants a user (sacctmgr) and check a QoS ladder against it before any submit.

It reads accounting once and judges the ladder from those values; it never changes accounting, never
submits, and never guesses a limit it could not read (an unreadable limit is treated as no limit).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping

import attrs

from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.errors import ConfigError, SchedulerError
from fellows_fsm.scheduler import FinishedJob, History, JobSpec, PendingJob, RunningJob
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
    "discover",
    "gpu_count",
    "parse_assoc",
    "parse_duration",
    "parse_history_sacct",
    "parse_nodes",
    "parse_qos",
    "parse_queue",
    "read_history",
]

log = logging.getLogger(__name__)

ASSOC_FIELDS = "Cluster,Account,User,Partition,QOS,DefaultQOS,GrpTRES"
QOS_FIELDS = "Name,Priority,MaxWall,MaxTRESPU,GrpTRES,Flags"
_DURATION = re.compile(r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")
# gres/gpu=N counts every GPU; gres/gpu:<type>=N counts one model only and is not a cap on all GPUs.
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(?P<n>\d+)(?:,|$)")


def parse_duration(text: str) -> int | None:
    """A SLURM duration as seconds; None for an empty or unlimited value.

    Forms: ``D-HH:MM:SS``, ``D-HH:MM``, ``D-HH``, ``HH:MM:SS``, ``MM:SS``, ``MM`` (SLURM's own reading).
    """
    text = text.strip()
    if text in ("", "UNLIMITED", "INFINITE", "Partition_Limit", "None"):
        return None
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a SLURM duration: {text!r}")
    days = int(match["days"] or 0)
    parts = [int(p) for p in (match["a"], match["b"], match["c"]) if p is not None]
    if match["days"] is not None:
        # With days: D-HH, D-HH:MM, D-HH:MM:SS.
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0, parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def gpu_count(tres: str) -> int | None:
    """The ``gres/gpu=N`` count in a TRES list such as ``cpu=4,gres/gpu=16``, or None if absent."""
    match = _GPU_TRES.search(tres.strip())
    return int(match["n"]) if match else None


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
        return Ladder(tuple(Rung(i, r.qos, r.park_cap_seconds) for i, r in enumerate(self.rungs)))


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


def _hms(seconds: int) -> str:
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def check_ladder(ladder: Ladder, grants: Grants, spec: JobSpec) -> LadderCheck:
    """Judge each rung for ``spec``: refuse ungranted QoS, skip rungs that never fit it, warn on shared caps.

    Raises ConfigError naming the first ungranted QoS and listing the granted ones.
    """
    granted = grants.granted
    for rung in ladder.rungs:
        if grants.qos and rung.qos not in grants.qos:
            known = ", ".join(sorted(grants.qos))
            raise ConfigError(
                f"QoS {rung.qos!r} in the ladder {list(ladder.qos_names)!r} does not exist on this cluster "
                f"(its QoS: {known}); fix the name in [fellows] or remove it"
            )
        if rung.qos not in granted:
            listed = ", ".join(sorted(granted)) or "none"
            raise ConfigError(
                f"QoS {rung.qos!r} in the ladder {list(ladder.qos_names)!r} is not granted to user "
                f"{grants.user!r} (granted: {listed}); remove it from [fellows] or ask an admin to grant it"
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


# ----------------------------------------------------------------- the cluster's history (park_early calibrated)
HISTORY_SACCT_FIELDS = "JobID,User,State,ElapsedRaw,TimelimitRaw"
QUEUE_FORMAT = "JobID:|,UserName:|,StateCompact:|,StartTime:|,TimeLimit:|,tres-alloc:|,PriorityLong:|,QOS:|,Reason:|"
ENDED_ON_THEIR_OWN = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"})
"""The end states a finished job's elapsed time says something about; a cancelled job (someone's decision) and
a job that never ran are left out."""


def history_sacct_argv(since: float, *, user: str | None = None) -> tuple[str, ...]:
    """sacct of every user's jobs (``-a``; the user's own with ``user``) since ``since``, one line per job."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    who = ("-u", user) if user is not None else ("-a",)
    return ("sacct", "-P", "-n", "-X", *who, f"--starttime={start}", "-o", HISTORY_SACCT_FIELDS)


def parse_history_sacct(stdout: str, *, user: str) -> tuple[list[FinishedJob], bool]:
    """The jobs that ended on their own with a time limit, and whether any other user's job was visible."""
    finished: list[FinishedJob] = []
    others = False
    for line in stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5:
            continue
        _, owner, state, elapsed, limit = parts[:5]
        others = others or owner not in ("", user)
        if state.split(" ", 1)[0] not in ENDED_ON_THEIR_OWN or not elapsed.isdigit() or not limit.isdigit():
            continue  # cancelled, still running, or no limit (UNLIMITED, Partition_Limit)
        if int(limit) > 0:
            finished.append(FinishedJob(float(elapsed), 60.0 * int(limit)))  # TimelimitRaw is in minutes
    return finished, others


def _epoch(text: str) -> float | None:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_queue(stdout: str, *, user: str) -> tuple[list[RunningJob], list[PendingJob]]:
    """``squeue -t RUNNING,PENDING -O QUEUE_FORMAT`` lines: each running job's start, limit and GPUs, and each
    pending job's GPUs, priority, QoS and reason (``own`` for ``user``'s)."""
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 9 or not parts[0]:
            continue
        job_id, owner, state, start, limit_text, tres, priority, qos, reason = parts[:9]
        gpus = _tres_gpus(tres)
        if state == "PD":
            rank = float(priority) if priority.isdigit() else 0.0
            pending.append(PendingJob(job_id, gpus, rank, qos or None, reason or None, owner == user))
            continue
        started = _epoch(start)
        if state != "R" or started is None:
            continue
        try:
            limit = parse_duration(limit_text)
        except ValueError:
            limit = None
        running.append(RunningJob(job_id, gpus, started, None if limit is None else float(limit)))
    return running, pending


def _tres_gpus(tres: str) -> int:
    return gpu_count(tres) or 0


def parse_nodes(stdout: str) -> tuple[int | None, int | None]:
    """GPUs configured and allocated over every node of ``scontrol -o show node`` (CfgTRES, AllocTRES)."""
    total = used = 0
    seen = False
    for line in stdout.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "CfgTRES" not in fields:
            continue
        seen = True
        total += gpu_count(fields["CfgTRES"]) or 0
        used += gpu_count(fields.get("AllocTRES", "")) or 0
    return (total, used) if seen else (None, None)


def read_history(runner: CommandRunner, *, user: str, since: float, now: float) -> History:
    """The cluster's history in three commands: sacct (every user where the site allows it, else ``-u user``),
    squeue of the running and pending jobs, and the nodes' GPUs (scontrol).

    Under ``PrivateData=jobs`` a plain user's ``sacct -a`` and ``squeue`` show only that user's jobs: the history
    is then the user's own (``all_users`` False), and the nodes' allocated GPUs beyond the visible running jobs
    say that jobs in the way are hidden (the calibrated policy then waits, as own-cap). A command that fails
    raises SchedulerError (the caller keeps its last history).
    """
    result = runner.run(history_sacct_argv(since))
    if not result.ok:
        log.info("sacct -a refused (%s); reading your own jobs only", result.message)
        result = runner.run(history_sacct_argv(since, user=user))
        if not result.ok:
            raise SchedulerError(f"sacct could not read the finished jobs: {result.message}")
    finished, others = parse_history_sacct(result.stdout, user=user)
    queue = runner.run(("squeue", "-h", "-t", "RUNNING,PENDING", "-O", QUEUE_FORMAT))
    if not queue.ok:
        raise SchedulerError(f"squeue could not list the running jobs: {queue.message}")
    running, pending = parse_queue(queue.stdout, user=user)
    nodes = runner.run(("scontrol", "-o", "show", "node"))
    total, used = parse_nodes(nodes.stdout) if nodes.ok else (None, None)
    return History(
        now,
        finished,
        running,
        pending,
        total_gpus=total,
        used_gpus=used,
        all_users=others,
    )
