"""Observe many jobs in one round trip: one squeue for all ids, one sacct only for ids squeue no longer knows.

It never filters by QoS or partition (a walking job changes both), never trusts one empty or failed reply,
and never reads a job it cannot find as finished: such a job is Phase.UNKNOWN. A limit reason seen for a
pending job is remembered until the job leaves that QoS or stops pending (SLURM >= 24.11 blanks it to
``None`` after each backfill pass), so what users see and what the journal records does not flicker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import attrs

from fellows_fsm.errors import SchedulerUnreachable
from fellows_fsm.scheduler.fields import parse_duration, parse_utc, utc_stamp
from fellows_fsm.scheduler.port import COULD_NOT_TELL, JobEnd, Observation, Phase, ReasonGroup
from fellows_fsm.slurm.runner import ONE_ATTEMPT, CommandRunner

__all__ = [
    "SACCT_FIELDS",
    "SQUEUE_FIELDS",
    "SQUEUE_FORMAT",
    "JobRow",
    "Observer",
    "ended_word",
    "gpus_of",
    "parse_exit_code",
    "parse_sacct",
    "parse_slurm_time",
    "parse_squeue",
    "phase_of",
    "sacct_argv",
    "squeue_argv",
]

log = logging.getLogger(__name__)

# squeue -O with a '|' suffix on every field: no padding, no truncation (measured on 22.05). BatchHost tells a
# real start from the start time SLURM stamps on a job cancelled while pending (the cancel time); RestartCnt
# tells a job that ran and was requeued (it reads PENDING, no batch host, a future start) from one that never
# ran; the comment (the dispatch token) comes last since it may hold '|'.
SQUEUE_FIELDS = (
    "JobID",
    "State",
    "Reason",
    "QOS",
    "StartTime",
    "BatchHost",
    "RestartCnt",
    "Partition",
    "TimeLimit",
    "Comment",
)
SQUEUE_FORMAT = ",".join(f"{field}:|" for field in SQUEUE_FIELDS)
# NodeList ("None assigned" for a job that never ran) plays %B's part: sacct's Start of a job cancelled
# while pending is sometimes None and sometimes the cancel time. ExitCode, ElapsedRaw, AllocTRES and End say how a
# started job ended (its result, exit code and GPU-hours); the comment comes last since it may hold '|'.
SACCT_FIELDS = "JobID,State,Reason,QOS,Start,NodeList,ExitCode,ElapsedRaw,AllocTRES,End,Comment"
_SACCT_PARTS = SACCT_FIELDS.count(",") + 1
INVALID_JOB_ID = "Invalid job id specified"

_PENDING = frozenset({"PENDING", "RESV_DEL_HOLD", "REQUEUE_HOLD", "REQUEUED", "REQUEUE_FED", "SPECIAL_EXIT"})
_ACTIVE = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
)
_ENDED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"})
_ENDED_MAYBE_UNSTARTED = frozenset({"CANCELLED", "DEADLINE"})
_NO_VALUE = frozenset({"", "N/A", "n/a", "None", "Unknown", "(null)"})
# Reasons that name a limit of the job's QoS or association: they change only when the limit or the usage
# it counts changes, which the main scheduler reports with a new reason (or a start).
_LIMIT_GROUPS = frozenset({ReasonGroup.OWN_CAP, ReasonGroup.SHARED_CAP, ReasonGroup.NEVER_FITS})
# Jobs whose limit reason is remembered at most; beyond it the oldest is forgotten (a job read as
# "not evaluated" once is harmless: the next main-scheduler pass names the limit again).
_MAX_REMEMBERED = 10_000


def parse_slurm_time(text: str) -> float | None:
    """A SLURM timestamp (``2026-01-31T12:00:00``, in UTC: the runner's ``TZ=UTC``) as epoch seconds; None for
    N/A or None."""
    text = text.strip()
    if text in _NO_VALUE:
        return None
    return parse_utc(text)


def phase_of(state: str, *, started: bool) -> Phase:
    """Map a SLURM state word (squeue %T, or sacct's first word as in ``CANCELLED by 0``) to a Phase."""
    word = state.split(" ", 1)[0].rstrip("+")
    if word in _ACTIVE:
        return Phase.STARTED
    if word in _PENDING:
        # A requeued job ran once: for the dispatch it started, whatever it does next.
        return Phase.STARTED if started and word != "PENDING" else Phase.PENDING
    if word in _ENDED or word in _ENDED_MAYBE_UNSTARTED:
        return Phase.STARTED if started else Phase.GONE
    return Phase.UNKNOWN


@attrs.frozen
class JobRow:
    """One job line from squeue or sacct, parsed; ``observation`` is what the port reports."""

    job_id: str
    observation: Observation
    comment: str | None


def _text_or_none(text: str) -> str | None:
    text = text.strip()
    return None if text in _NO_VALUE else text


def _row(
    job_id: str,
    state: str,
    reason: str,
    qos: str,
    start: str,
    *,
    started: bool,
    comment: str,
    restarted: bool = False,
    partition: str = "",
    time_limit: str = "",
    ended: tuple[str, str, str, str] | None = None,
) -> JobRow:
    # A requeued job ran once: for the dispatch it started, whatever it reads now (PENDING, a future start).
    phase = Phase.STARTED if restarted else phase_of(state, started=started)
    start_time = parse_slurm_time(start) if started else None
    # For a pending job the same field is the backfill scheduler's expected start (the estimate park_early reads).
    expected = parse_slurm_time(start) if phase is Phase.PENDING else None
    observation = Observation(
        job_id=job_id,
        phase=phase,
        state=state,
        # SLURM keeps the last pending reason on ended jobs; only a pending job's reason means anything.
        reason=_text_or_none(reason) if phase is Phase.PENDING else None,
        qos=_text_or_none(qos),
        start_time=start_time,
        token=_text_or_none(comment),
        expected_start=expected,
        partition=_text_or_none(partition),
        time_limit_seconds=_limit_seconds(time_limit),
        end=_end_of(state, ended) if ended is not None and phase is Phase.STARTED else None,
    )
    return JobRow(job_id, observation, observation.token)


def ended_word(state: str) -> bool:
    """Is ``state`` (squeue's or sacct's word, e.g. ``CANCELLED by 0``) one a job ends with?"""
    word = state.split(" ", 1)[0].rstrip("+")
    return word in _ENDED or word in _ENDED_MAYBE_UNSTARTED


def parse_exit_code(text: str) -> int | None:
    """sacct's ``ExitCode`` (``3:0``: exit 3; ``0:9``: killed by signal 9, read as 128 + 9) as one integer."""
    code, _, signal = text.strip().partition(":")
    if not code.isdigit():
        return None
    if int(code) == 0 and signal.isdigit() and int(signal) > 0:
        return 128 + int(signal)
    return int(code)


def gpus_of(tres: str) -> int | None:
    """The GPUs in a TRES list (``cpu=1,gres/gpu=2,mem=1G``: 2; ``gres/gpu:a100=2`` counts too); None: none listed."""
    total = None
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if (name == "gres/gpu" or name.startswith("gres/gpu:")) and count.isdigit():
            if name == "gres/gpu":
                return int(count)
            total = (total or 0) + int(count)
    return total


def _end_of(state: str, ended: tuple[str, str, str, str]) -> JobEnd | None:
    """A started job's end from sacct's ExitCode, ElapsedRaw, AllocTRES and End (None: it has not ended)."""
    if not ended_word(state):
        return None
    exit_code, elapsed, tres, end = ended
    return JobEnd(
        state=state,
        exit_code=parse_exit_code(exit_code),
        elapsed_seconds=float(elapsed) if elapsed.strip().isdigit() else None,
        gpus=gpus_of(tres),
        ended_at=parse_slurm_time(end),
    )


def _limit_seconds(text: str) -> int | None:
    """A TimeLimit as squeue prints it (``10:00``, ``1-00:00:00``) in seconds; None for UNLIMITED or unreadable."""
    text = text.strip()
    if not text or text in _NO_VALUE or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _parse_rows(stdout: str, command: str, *, ran: Callable[[str], bool]) -> dict[str, JobRow]:
    """Parse ``SACCT_FIELDS`` lines (``id|state|reason|qos|start|<where it ran>|exit|elapsed|tres|end|comment``);
    ``ran`` reads the where-it-ran field."""
    rows: dict[str, JobRow] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", _SACCT_PARTS - 1)
        if len(parts) != _SACCT_PARTS:
            log.warning("%s: ignoring a line not in the expected format: %r", command, line)
            continue
        job_id, state, reason, qos, start, where, exit_code, elapsed, tres, end, comment = parts
        started = ran(where) and parse_slurm_time(start) is not None
        rows[job_id.strip()] = _row(
            job_id.strip(),
            state.strip(),
            reason,
            qos,
            start,
            started=started,
            comment=comment,
            ended=(exit_code, elapsed, tres, end),
        )
    return rows


def parse_squeue(stdout: str) -> dict[str, JobRow]:
    """Parse ``squeue -h -O SQUEUE_FORMAT`` lines; a job started if it has a batch host or was ever restarted."""
    rows: dict[str, JobRow] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.removesuffix("|").split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            log.warning("squeue: ignoring a line not in the expected format: %r", line)
            continue
        job_id, state, reason, qos, start, host, restarts, partition, limit, comment = (part.strip() for part in parts)
        started = _text_or_none(host) is not None and parse_slurm_time(start) is not None
        restarted = restarts.isdigit() and int(restarts) > 0
        rows[job_id] = _row(
            job_id,
            state,
            reason,
            qos,
            start,
            started=started,
            comment=comment,
            restarted=restarted,
            partition=partition,
            time_limit=limit,
        )
    return rows


def parse_sacct(stdout: str) -> dict[str, JobRow]:
    """Parse ``sacct -P -n -X -o SACCT_FIELDS`` lines; a job counts as started only if it had nodes."""
    return _parse_rows(stdout, "sacct", ran=lambda nodes: _text_or_none(nodes) not in (None, "None assigned"))


def squeue_argv(job_ids: Iterable[str] | None = None, *, user: str | None = None) -> tuple[str, ...]:
    """The squeue argv for the ids (or every job of ``user``), all states, never a QoS/partition filter."""
    argv = ["squeue", "-h", "-t", "all"]
    if job_ids is not None:
        argv += ["-j", ",".join(job_ids)]
    if user is not None:
        argv += ["-u", user]
    return (*argv, "-O", SQUEUE_FORMAT)


def sacct_argv(job_ids: Iterable[str] | None = None, *, user: str | None = None, since: float) -> tuple[str, ...]:
    """The sacct argv for the given ids (or every job of ``user``) since ``since`` (epoch seconds)."""
    argv = ["sacct", "-P", "-n", "-X", f"--starttime={utc_stamp(since)}"]
    if job_ids is not None:
        argv += ["-j", ",".join(job_ids)]
    if user is not None:
        argv += ["-u", user]
    return (*argv, "-o", SACCT_FIELDS)


def _booked_end(seen: Observation, booked: JobRow | None, *, answered: bool) -> JobEnd | None:
    """How a job squeue shows ended ended: accounting's record; squeue's word alone when accounting answered with
    no record of it (COMPLETED is exit 0 by SLURM's definition); None when accounting could not be asked."""
    if booked is not None and booked.observation.end is not None:
        # A record with no End yet is accounting catching up (slurmdbd was down when the job ended: its end
        # message is still on its way from slurmctld, and the record reads an exit code of 0): asked again.
        return booked.observation.end if booked.observation.end.ended_at is not None else None
    if not answered or booked is not None:
        return None  # could not tell, or accounting still has it running: asked again next poll
    word = seen.state.split(" ", 1)[0]
    return JobEnd(state=seen.state, exit_code=0 if word == "COMPLETED" else None, accounted=False)


@attrs.define
class Observer:
    """Turns job ids into Observations: ONE squeue (one attempt), at most one sacct for the ids it did not show.

    An empty or failed reply is never trusted: its ids fall through to sacct and, if sacct does not know them
    either, read UNKNOWN, on which nothing is decided. The next poll (one interval later) asks again; asking
    again within the poll would break the promise of one squeue per poll interval.
    """

    runner: CommandRunner
    empty_retries: int = 0
    """How often an empty or failed squeue reply is asked again within one observe (0: the next poll asks)."""
    retry_delay_seconds: float = 0.2
    sacct_lookback_seconds: float = 7 * 86_400
    """How far back sacct looks (without --starttime it would only cover since midnight)."""
    _limit_reasons: dict[str, tuple[str | None, str]] = attrs.field(factory=dict, init=False, repr=False)
    """Per pending job id: the QoS and the limit reason last seen for it (see ``_steady``)."""
    listed: dict[str, JobRow] | None = attrs.field(default=None, init=False, repr=False)
    """The last observe's whole listing when it listed every job of a user (``user``), else None."""

    def observe(self, job_ids: Sequence[str], *, user: str | None = None) -> dict[str, Observation]:
        """Every id in ``job_ids`` mapped to an Observation; ids no record knows map to Phase.UNKNOWN (with
        ``COULD_NOT_TELL`` when sacct could not be asked). A started job squeue shows ended, or no longer shows, is
        read in the same one sacct: how it ended (``Observation.end``) is accounting's word, never a guess.
        ``user``: the one squeue lists every job of that user instead of the ids (kept in ``listed``: the lost
        submits' lookups of the same tick read it instead of a squeue of their own)."""
        self.listed = None
        wanted = list(dict.fromkeys(job_ids))
        if not wanted:
            return {}
        rows = self._squeue(wanted, user=user)
        if user is not None and rows:
            self.listed = rows
        ended = {i for i in wanted if i in rows and rows[i].observation.phase is Phase.STARTED}
        ended = {i for i in ended if ended_word(rows[i].observation.state)}
        asked = [job_id for job_id in wanted if job_id not in rows or job_id in ended]
        accounted = self._accounting(asked) if asked else {}
        out: dict[str, Observation] = {}
        for job_id in wanted:
            row = rows.get(job_id)
            booked = accounted.get(job_id) if accounted is not None else None
            if row is None:
                if booked is not None:
                    out[job_id] = self._steady(booked.observation)
                else:
                    out[job_id] = Observation(
                        job_id, Phase.UNKNOWN, state="" if accounted is not None else COULD_NOT_TELL
                    )
                continue
            seen = self._steady(row.observation)
            if job_id in ended:
                seen = attrs.evolve(seen, end=_booked_end(seen, booked, answered=accounted is not None))
            out[job_id] = seen
        return out

    def _accounting(self, job_ids: Sequence[str]) -> dict[str, JobRow] | None:
        """One sacct for ``job_ids``, one attempt; None when it could not be asked (slurmdbd down, or slurmctld
        with it: asked again next poll, and never the reason to pause a cluster whose squeue answered)."""
        since = time.time() - self.sacct_lookback_seconds
        try:
            result = self.runner.run(sacct_argv(job_ids, since=since), retry=ONE_ATTEMPT)
        except SchedulerUnreachable as exc:
            log.warning("sacct could not be asked (%s); the jobs stay unknown", exc)
            return None
        if not result.ok:
            log.warning("sacct failed (%s); the jobs stay unknown", result.message)
            return None
        return parse_sacct(result.stdout)

    def _steady(self, seen: Observation) -> Observation:
        """``seen``, with the last limit reason of a still-pending job on the same QoS instead of ``None``.

        From SLURM 24.11 a job held back by a QoS limit shows the limit (e.g. QOSMaxGRESPerUser) after each
        main-scheduler pass and ``None`` after each backfill pass: that ``None`` is not "not evaluated yet".
        Any other reason, a QoS change, or leaving PENDING forgets the remembered one.
        """
        job_id = seen.job_id
        if seen.phase is not Phase.PENDING:
            self._limit_reasons.pop(job_id, None)
            return seen
        if seen.reason is not None:
            if seen.reason_group in _LIMIT_GROUPS:
                self._limit_reasons.pop(job_id, None)
                self._limit_reasons[job_id] = (seen.qos, seen.reason)
                while len(self._limit_reasons) > _MAX_REMEMBERED:
                    del self._limit_reasons[next(iter(self._limit_reasons))]
            else:
                self._limit_reasons.pop(job_id, None)
            return seen
        remembered = self._limit_reasons.get(job_id)
        if remembered is None:
            return seen
        qos, reason = remembered
        if qos != seen.qos:
            del self._limit_reasons[job_id]
            return seen
        return attrs.evolve(seen, reason=reason)

    def _squeue(self, job_ids: list[str], *, user: str | None = None) -> dict[str, JobRow]:
        """One squeue for ``job_ids`` (or every job of ``user``), one attempt: an unreachable controller raises at
        once (the poll backs off)."""
        argv = squeue_argv(user=user) if user is not None else squeue_argv(job_ids)
        for attempt in range(self.empty_retries + 1):
            if attempt:
                self.runner.sleep(self.retry_delay_seconds * attempt)
            result = self.runner.run(argv, retry=ONE_ATTEMPT)
            if result.ok:
                rows = parse_squeue(result.stdout)
                if rows:
                    return rows
            elif INVALID_JOB_ID not in result.stderr:
                log.warning("squeue failed (%s); asking again", result.message)
        return {}

    def sacct_rows(self, job_ids: Sequence[str] | None = None, *, user: str | None = None) -> dict[str, JobRow]:
        """One sacct for jobs squeue no longer shows; a failed sacct leaves them unknown (never finished)."""
        since = time.time() - self.sacct_lookback_seconds
        result = self.runner.run(sacct_argv(job_ids, user=user, since=since))
        if not result.ok:
            log.warning("sacct failed (%s); the jobs stay unknown", result.message)
            return {}
        return parse_sacct(result.stdout)
