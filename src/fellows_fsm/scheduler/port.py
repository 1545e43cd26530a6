"""The port to the cluster: the Scheduler protocol and the values that cross it.

The lifecycle machine knows the cluster only through this protocol. ``fake.py`` implements it in memory,
``slurm/`` implements it with the real SLURM commands. Nothing here performs I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import attrs

from fellows_fsm.errors import UsageError

if TYPE_CHECKING:
    import os

__all__ = [
    "COULD_NOT_TELL",
    "FinishedJob",
    "JobEnd",
    "JobSpec",
    "Observation",
    "PendingJob",
    "Phase",
    "ReasonGroup",
    "RunningJob",
    "Scheduler",
    "Workload",
    "classify_reason",
    "job_spec",
]


class Phase(enum.Enum):
    """What a job's SLURM state means for a dispatch."""

    PENDING = "pending"
    """Queued and not started."""
    STARTED = "started"
    """Running, or ran at some point (completing, completed, failed after start): the dispatch started."""
    GONE = "gone"
    """Ended without ever starting (cancelled while pending, deadline passed): confirmed gone."""
    UNKNOWN = "unknown"
    """The scheduler does not know the job right now; never a reason to decide anything."""


class ReasonGroup(enum.Enum):
    """What a pending reason says about the rung the job waits on (see docs/design.md)."""

    NOT_EVALUATED = "not-evaluated"
    """``None``: the scheduler has not looked at the job yet."""
    OWN_CAP = "own-cap"
    """A per-user limit of this QoS: clears when the user's own jobs end; the next rung's budget is free."""
    SHARED_CAP = "shared-cap"
    """A group limit (QoS or association GrpTRES): shared, so walking the ladder may not help."""
    CONTENTION = "contention"
    """Waiting for resources or for higher-priority jobs."""
    NEVER_FITS = "never-fits"
    """This rung can never start the job (a per-job limit such as MaxWall): park without waiting."""
    INVALID = "invalid"
    """The QoS or account is not valid for the job: this rung can never start it."""
    HELD = "held"
    """Held by the user or an admin."""
    WAITING = "waiting"
    """Waiting on a dependency or a begin time."""
    OTHER = "other"
    """A reason this table does not know."""


_NOT_EVALUATED = ReasonGroup.NOT_EVALUATED
_PER_JOB_LIMIT = re.compile(r"^(QOS|Assoc)Max\w*PerJob(Limit)?$|^(QOS|Assoc)Min\w*$")
_PER_USER_LIMIT = re.compile(r"^(QOS|Assoc)Max\w*(PerUser|PerAccount)\w*$")
_GROUP_LIMIT = re.compile(r"^(QOS|Assoc)Grp\w*$")
_FIXED_GROUPS: Mapping[str, ReasonGroup] = {
    "None": ReasonGroup.NOT_EVALUATED,
    "": ReasonGroup.NOT_EVALUATED,
    "Resources": ReasonGroup.CONTENTION,
    "Priority": ReasonGroup.CONTENTION,
    "Reservation": ReasonGroup.CONTENTION,
    "NodeDown": ReasonGroup.CONTENTION,
    # An admin closed the partition (or it is not active yet): it may open again, so the rung waits its window.
    "PartitionDown": ReasonGroup.CONTENTION,
    "PartitionInactive": ReasonGroup.CONTENTION,
    "PartitionTimeLimit": ReasonGroup.NEVER_FITS,
    "PartitionNodeLimit": ReasonGroup.NEVER_FITS,
    "BadConstraints": ReasonGroup.NEVER_FITS,
    "DependencyNeverSatisfied": ReasonGroup.NEVER_FITS,
    "InvalidQOS": ReasonGroup.INVALID,
    "InvalidAccount": ReasonGroup.INVALID,
    "QOSNotAllowed": ReasonGroup.INVALID,
    "JobHeldUser": ReasonGroup.HELD,
    "JobHeldAdmin": ReasonGroup.HELD,
    "Dependency": ReasonGroup.WAITING,
    "BeginTime": ReasonGroup.WAITING,
}


def classify_reason(reason: str | None) -> ReasonGroup:
    """Put a SLURM pending reason (``squeue %r``) into the group that decides what a rung can do."""
    if reason is None:
        return _NOT_EVALUATED  # (a module name: an Enum member read off its class is slow, and every look asks)
    if reason in _FIXED_GROUPS:
        return _FIXED_GROUPS[reason]
    if reason.startswith("ReqNodeNotAvail"):
        return ReasonGroup.CONTENTION
    if _PER_JOB_LIMIT.match(reason):
        return ReasonGroup.NEVER_FITS
    if _PER_USER_LIMIT.match(reason):
        return ReasonGroup.OWN_CAP
    if _GROUP_LIMIT.match(reason):
        return ReasonGroup.SHARED_CAP
    return ReasonGroup.OTHER


_LIVE_STARTED = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING"})
"""SLURM's words for a job that started and has not ended."""


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    """``extra_args`` as a tuple; one string (whose letters would each become an argument) or a value that is no
    sequence is refused in one line (UsageError: what the command line's ``--`` can never give)."""
    if isinstance(items, str):
        raise UsageError(
            f"extra_args {items!r} is one string; give a sequence of sbatch arguments, e.g. ('--mem=64G',)"
        )
    try:
        return tuple(items)
    except TypeError:
        raise UsageError(
            f"extra_args {items!r} is not a sequence; give a sequence of sbatch arguments, e.g. ('--mem=64G',)"
        ) from None


@attrs.frozen
class JobSpec:
    """What to run: an sbatch script and the resources the ladder must reason about."""

    name: str
    script: str
    """Path of the sbatch script."""
    gpus: int = 0
    time_limit_seconds: int | None = None
    """The job's ``--time``; None leaves the partition default."""
    extra_args: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)
    """More sbatch options, passed through verbatim (argv items, never a shell string)."""
    workdir: str | None = None
    """The directory ``submit`` was run from: a local sbatch runs there, as a plain sbatch would (so a job with no
    ``--chdir`` runs there); None: wherever the submitting process runs. Never used over ssh (a local path)."""
    kept_script: str | None = None
    """The copy of the script as it was at submit, kept in the state dir with the dispatch (journal/scripts.py):
    what every rung's sbatch and a paid lane read, so a script edited or removed later changes nothing. None: the
    script itself, read at each submit (a spec not yet journaled)."""

    @property
    def script_file(self) -> str:
        """The file a submit reads the job's script from: the kept copy, else ``script``."""
        return self.kept_script or self.script

    @classmethod
    def from_script(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        gpus: int | None = None,
        time_limit_seconds: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> JobSpec:
        """The job of an sbatch script, read as ``fellows-fsm submit SCRIPT`` reads it: its ``#SBATCH`` lines'
        GPUs (``--gres=gpu:N``, ``--gpus``), wall time (``--time``) and name (``--job-name``; else the file's stem),
        each given argument winning over its line as a command-line flag does. Checked as a submit checks a job
        (``scheduler/script.py``: ``check_spec``): a missing or unreadable script, a line or argument fellows-fsm
        refuses, or a bad value raises UsageError (exit 2) naming it, before anything is journaled or queued.

        It reads a file: the one method here that does I/O, through the script reader (``scheduler/script.py``:
        ``spec_from_script``), imported only when called, so that what the core imports does no I/O (the core never
        calls it)."""
        from fellows_fsm.scheduler.script import spec_from_script  # noqa: PLC0415 - the core imports this module

        return spec_from_script(
            cls, path, name=name, gpus=gpus, time_limit_seconds=time_limit_seconds, extra_args=extra_args
        )


def job_spec(
    name: str,
    script: str | os.PathLike[str],
    gpus: int = 0,
    time_limit_seconds: int | None = None,
    extra_args: Sequence[str] = (),
) -> JobSpec:
    """A JobSpec (one place for the ``extra_args`` converter, which mypy cannot see through); unchecked: a submit
    checks it (``scheduler/script.py``: ``check_spec``)."""
    return JobSpec(
        name=name,
        script=str(script),
        gpus=gpus,
        time_limit_seconds=time_limit_seconds,
        extra_args=tuple(extra_args),
    )


COULD_NOT_TELL = "could-not-tell"
"""An UNKNOWN observation's state when accounting (sacct) could not be asked: never counted toward a lost job."""


@attrs.frozen
class JobEnd:
    """How a started job ended, as accounting (sacct) reports it: SLURM's word, exit code, how long it ran, GPUs."""

    state: str
    """SLURM's own word, e.g. ``COMPLETED``, ``FAILED``, ``CANCELLED by 1000``."""
    exit_code: int | None = None
    """The job's exit code (a signal N reads 128 + N); None when SLURM gives none."""
    elapsed_seconds: float | None = None
    """How long it ran (sacct's Elapsed); None: accounting has no record."""
    gpus: int | None = None
    """The GPUs it held (sacct's AllocTRES gres/gpu); None: not known."""
    ended_at: float | None = None
    """When it ended (sacct's End)."""
    accounted: bool = True
    """False: read from squeue's word alone (accounting answered, with no record of the job)."""


@attrs.frozen
class Observation:
    """One job as the scheduler reported it at one moment."""

    job_id: str
    phase: Phase
    state: str = ""
    """The scheduler's own state word, e.g. ``PENDING``, ``RUNNING``, ``DEADLINE``."""
    reason: str | None = None
    """The pending reason, or None when not evaluated yet or not pending."""
    qos: str | None = None
    start_time: float | None = None
    """When the job started (only for a job that started)."""
    token: str | None = None
    """The job's comment as the scheduler reports it (the dispatch token); None when not reported."""
    partition: str | None = None
    """The partition as the scheduler reports it (squeue's Partition); None when not reported."""
    time_limit_seconds: int | None = None
    """The time limit as the scheduler reports it (squeue's TimeLimit); None when not reported or unlimited."""
    expected_start: float | None = None
    """For a PENDING job, when the scheduler expects to start it (squeue's StartTime: the backfill scheduler's
    estimate, computed from time limits); None when it gives none (N/A) or the job is not pending."""
    end: JobEnd | None = None
    """How a job that started has ended (None: it has not, or accounting could not say yet)."""

    @property
    def live(self) -> bool:
        """Is the job pending or running now (a cancel would end it), not ended?"""
        return self.phase is Phase.PENDING or (
            self.phase is Phase.STARTED and self.state.split(" ", 1)[0] in _LIVE_STARTED
        )

    @property
    def ended_by_others(self) -> bool:
        """True for a job cancelled outside the router (an scancel by its owner or an admin)."""
        return self.phase is Phase.GONE and self.state.split(" ", 1)[0] == "CANCELLED"

    @cached_property
    def reason_group(self) -> ReasonGroup:
        """The group of the pending reason (only meaningful while PENDING); worked out once per observation."""
        return classify_reason(self.reason)


@attrs.frozen
class FinishedJob:
    """One job that ran and ended on its own (completed, failed or timed out): how long it ran, against its limit."""

    elapsed_seconds: float
    limit_seconds: float

    @property
    def ratio(self) -> float:
        """Elapsed over limit, at most 1 (a job killed at its limit may be seen a few seconds past it)."""
        return min(1.0, self.elapsed_seconds / self.limit_seconds)


@attrs.frozen
class RunningJob:
    """One job running now: what it holds and since when, and its time limit (None: no limit)."""

    job_id: str
    gpus: int
    started_at: float
    limit_seconds: float | None


@attrs.frozen
class PendingJob:
    """One job pending now: what it asks for, its scheduling priority, its QoS and its pending reason."""

    job_id: str
    gpus: int
    priority: float
    qos: str | None = None
    reason: str | None = None
    own: bool = False
    """One of the reading user's own jobs (which may walk off its rung, or leave for the paid lane, itself)."""


def _pending(items: Iterable[PendingJob]) -> tuple[PendingJob, ...]:
    return tuple(items)


def _id_order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_", 1)[0]
    return (int(head), job_id) if head.isdigit() else (0, job_id)


def _finished(items: Iterable[FinishedJob]) -> tuple[FinishedJob, ...]:
    return tuple(items)


def _running(items: Iterable[RunningJob]) -> tuple[RunningJob, ...]:
    return tuple(items)


@attrs.frozen
class Workload:
    """The cluster's recent past and its present, as one read through the port saw them (``Scheduler.history``).

    Read at most once every few minutes, never per poll (the router's WorkloadCache), and handed to the core as a
    value: the ``calibrated`` park_early policy re-estimates the running jobs' ends from the finished ones.
    """

    read_at: float
    finished: tuple[FinishedJob, ...] = attrs.field(default=(), converter=_finished)
    """The jobs that ended on their own since the read's start (with a time limit)."""
    running: tuple[RunningJob, ...] = attrs.field(default=(), converter=_running)
    """The running jobs the read could see (others' may be hidden by the site's PrivateData)."""
    pending: tuple[PendingJob, ...] = attrs.field(default=(), converter=_pending)
    """The pending jobs the read could see (the ones ahead of a job take the GPUs that free up first)."""
    total_gpus: int | None = None
    """GPUs of the cluster's nodes (None: not known)."""
    used_gpus: int | None = None
    """GPUs allocated now, as the nodes report them (None: not known); more than ``running`` holds means jobs
    the read cannot see (PrivateData)."""
    all_users: bool = True
    """False when only the user's own jobs were visible (PrivateData, or sacct without the right to see others)."""

    @cached_property
    def ratios(self) -> tuple[float, ...]:
        """Every finished job's elapsed/limit, sorted (worked out once per read)."""
        return tuple(sorted(job.ratio for job in self.finished))

    def gpus_ahead_of(self, job_id: str, qos: str | None) -> int:
        """GPUs asked for by the pending jobs ahead of ``job_id`` that wait only for resources (Resources or
        Priority): a higher priority, or the same and an earlier id. The user's own count only on the same QoS (a
        burst's jobs on one rung compete for the same GPUs); on another QoS they may walk away. Its priority is its
        own in the read, else (queued since the read) the highest seen on its QoS; with neither, none is counted
        ahead."""
        mine = next((p.priority for p in self.pending if p.job_id == job_id), None)
        if mine is None:
            same = [p.priority for p in self.pending if qos is not None and p.qos == qos]
            if not same:
                return 0
            mine = max(same)
        key = _id_order(job_id)
        return sum(
            p.gpus
            for p in self.pending
            if p.job_id != job_id
            and (not p.own or (qos is not None and p.qos == qos))
            and classify_reason(p.reason) is ReasonGroup.CONTENTION
            and (p.priority > mine or (p.priority == mine and _id_order(p.job_id) < key))
        )

    @property
    def hidden_gpus(self) -> int:
        """GPUs allocated to jobs the read could not see (0 when the nodes' figure is not known)."""
        if self.used_gpus is None:
            return 0
        return max(0, self.used_gpus - sum(job.gpus for job in self.running))


class Scheduler(Protocol):
    """The port: everything the lifecycle machine and the router may ask of a cluster."""

    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        """Queue ``spec`` under ``qos``, tagged with the dispatch ``token``; return the job id.

        ``deadline`` (epoch seconds) asks the controller itself to drop the job if it cannot end by then.
        Raises QosRejected for a QoS the cluster refuses, SubmitRejected for any other refusal.
        """
        ...

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """Report every listed job in one round trip; an id the scheduler cannot place maps to UNKNOWN."""
        ...

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        """Cancel each job only if it is still pending; with ``read_back``, read them all back at once.

        A job that started before its cancel landed reads back STARTED: the late start wins. The router
        sends every cancel of a tick in one call with ``read_back=False``; the result then holds only the
        jobs the cancel itself proves gone (GONE), and the next tick's one observe reads back the others.
        """
        ...

    def change_qos(self, job_id: str, qos: str) -> bool:
        """Move a pending job to ``qos`` keeping its id; False once it is no longer pending (it started).

        Raises QosRejected for a QoS the cluster refuses.
        """
        ...

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs whatever their state (a user withdrawing a dispatch); ended jobs are fine."""
        ...

    def find_by_token(self, token: str) -> Observation | None:
        """Find the newest job tagged with a dispatch token (a submit whose reply was lost), or None."""
        ...

    def find_tokens(self, prefix: str) -> Sequence[Observation]:
        """Every pending or running job of this user whose token starts with ``prefix`` (one squeue)."""
        ...

    def workload(self, *, since: float) -> Workload:
        """The jobs that finished since ``since`` (elapsed and limit), the running ones, and the GPUs in use.

        Several commands (on SLURM: sacct, squeue, scontrol): read at most once every few minutes, never per poll.
        """
        ...
