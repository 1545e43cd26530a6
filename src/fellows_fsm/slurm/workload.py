"""The cluster's workload for ``park_early = "calibrated"``: finished jobs (sacct), running and pending jobs
(squeue) and the nodes' GPUs (scontrol), read through the runner in three commands and parsed into a Workload.

The cache in driver/workload.py (``WorkloadCache``) decides when it is read: at most once per refresh, never per
poll.
"""

from __future__ import annotations

import logging

from fellows_fsm.errors import SchedulerError
from fellows_fsm.scheduler.fields import gpu_count, parse_duration, parse_utc, utc_stamp
from fellows_fsm.scheduler.port import FinishedJob, PendingJob, RunningJob, Workload
from fellows_fsm.slurm.runner import CommandRunner

__all__ = [
    "ENDED_ON_THEIR_OWN",
    "HISTORY_SACCT_FIELDS",
    "QUEUE_FORMAT",
    "parse_nodes",
    "parse_queue",
    "parse_workload_sacct",
    "read_workload",
    "workload_sacct_argv",
]

log = logging.getLogger(__name__)

HISTORY_SACCT_FIELDS = "JobID,User,State,ElapsedRaw,TimelimitRaw"
QUEUE_FORMAT = "JobID:|,UserName:|,StateCompact:|,StartTime:|,TimeLimit:|,tres-alloc:|,PriorityLong:|,QOS:|,Reason:|"
ENDED_ON_THEIR_OWN = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"})
"""The end states a finished job's elapsed time says something about; a cancelled job (someone's decision) and
a job that never ran are left out."""


def workload_sacct_argv(since: float, *, user: str | None = None) -> tuple[str, ...]:
    """sacct of every user's jobs (``-a``; the user's own with ``user``) since ``since``, one line per job."""
    who = ("-u", user) if user is not None else ("-a",)
    return ("sacct", "-P", "-n", "-X", *who, f"--starttime={utc_stamp(since)}", "-o", HISTORY_SACCT_FIELDS)


def parse_workload_sacct(stdout: str, *, user: str) -> tuple[list[FinishedJob], bool]:
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
        started = parse_utc(start)
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


def read_workload(runner: CommandRunner, *, user: str, since: float, now: float) -> Workload:
    """The cluster's workload in three commands: sacct (every user where the site allows it, else ``-u user``),
    squeue of the running and pending jobs, and the nodes' GPUs (scontrol).

    Under ``PrivateData=jobs`` a plain user's ``sacct -a`` and ``squeue`` show only that user's jobs: the workload
    is then the user's own (``all_users`` False), and the nodes' allocated GPUs beyond the visible running jobs
    say that jobs in the way are hidden (the calibrated policy then waits, as own-cap). A command that fails
    raises SchedulerError (the caller keeps its last workload).
    """
    result = runner.run(workload_sacct_argv(since))
    if not result.ok:
        log.info("sacct -a refused (%s); reading your own jobs only", result.message)
        result = runner.run(workload_sacct_argv(since, user=user))
        if not result.ok:
            raise SchedulerError(f"sacct could not read the finished jobs: {result.message}")
    finished, others = parse_workload_sacct(result.stdout, user=user)
    queue = runner.run(("squeue", "-h", "-t", "RUNNING,PENDING", "-O", QUEUE_FORMAT))
    if not queue.ok:
        raise SchedulerError(f"squeue could not list the running jobs: {queue.message}")
    running, pending = parse_queue(queue.stdout, user=user)
    nodes = runner.run(("scontrol", "-o", "show", "node"))
    total, used = parse_nodes(nodes.stdout) if nodes.ok else (None, None)
    return Workload(
        now,
        finished,
        running,
        pending,
        total_gpus=total,
        used_gpus=used,
        all_users=others,
    )
