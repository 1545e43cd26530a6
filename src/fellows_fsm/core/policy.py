"""When a rung is left before its window closes (``[fellows] park_early``): the one place that decides it.

It only ever makes a park earlier, never later: the park cap still closes every window, so the worst case
before the paid lane never grows. It reads one observation (the pending reason and SLURM's start estimate,
both from the poll's one squeue), the window's end and, for ``calibrated``, the cluster's Workload (a value read
through the port every few minutes and handed in); it does no I/O and keeps no state.
"""

from __future__ import annotations

import bisect
import math
import time
from statistics import median

import attrs

from fellows_fsm.scheduler.port import Observation, Phase, ReasonGroup, Workload

__all__ = [
    "CALIBRATED",
    "CALIBRATED_EARLIER_HORIZON",
    "CALIBRATED_LEAVE_BELOW",
    "CALIBRATED_LEAVE_EARLIER_BELOW",
    "CALIBRATED_LEAVE_LAST_BELOW",
    "CALIBRATED_MIN_FINISHED",
    "DEFAULT_PARK_EARLY",
    "DEFAULT_PARK_EARLY_LAST_RUNG",
    "PARK_EARLY_POLICIES",
    "WORKLOAD_SPAN_SECONDS",
    "StartChance",
    "calibrates",
    "park_early_reason",
    "start_chance",
]

PARK_EARLY_POLICIES = ("off", "own-cap", "estimate", "calibrated", "calibrated-last")
"""off: wait out every window. own-cap: leave at once while the user's own per-QoS cap holds the job back.
estimate: leave once SLURM's start estimate lies past the window's end. calibrated: own-cap, and any rung is left
(the last one for the paid lane) when the cluster's own workload says the job is unlikely to start there within
the rung's window. calibrated-last: the same, on the last rung only (own-cap on the others; issue 21's policy)."""
CALIBRATED = ("calibrated", "calibrated-last")
WORKLOAD_SPAN_SECONDS = 2 * 86_400.0
"""How far back the finished jobs are read for a calibrated policy, by default (``[fellows]
calibrated_history_seconds``)."""
"""The policies that read the cluster's workload."""
CALIBRATED_MIN_FINISHED = 20
"""With fewer finished jobs in the workload, ``calibrated`` behaves exactly as ``own-cap``."""
CALIBRATED_LEAVE_BELOW = 0.05
"""``calibrated-last`` leaves the last rung (for the paid lane) when the chance of starting on it within its window
is below this (a chance exactly at it keeps the job waiting)."""
CALIBRATED_LEAVE_LAST_BELOW = 0.02
"""``calibrated``'s threshold on the last rung (the only rung whose early leave pays): the largest of those tried
(0.05, 0.02) that sent no more GPU-hours to GCP than own-cap on any of five seeds of the synthetic workload
(docs/benchmarks.md, issue 28)."""
CALIBRATED_LEAVE_EARLIER_BELOW = 0.001
"""``calibrated`` leaves an earlier rung when the chance of starting on it before the ladder's end is below this:
the walk down is hurried only for a job the paid lane is all but sure to take. Leaving an earlier rung pays nothing
by itself (the rest of its window carries to the next rung) but gives up its priority, which cost GPU-hours at
0.05 and 0.01 (docs/benchmarks.md, issue 28)."""
CALIBRATED_EARLIER_HORIZON = "ladder"
"""What ``calibrated`` asks on an earlier rung: "ladder", the chance of a start on this rung (its priority, the
best the rest of the ladder offers) before the ladder's end, so the job walks down early only when the paid lane
is the likely end anyway; "rung", the chance within this rung's own window (issue 28's first cut, which gave up
high-eur's priority for jobs the free cluster would have started later: kept for the benchmark's comparison)."""
DEFAULT_PARK_EARLY = "own-cap"
"""The default, chosen from the sweep in docs/benchmarks.md (section "park_early"): with time limits 2x or 10x the
durations, leaving contended rungs on SLURM's (too late) estimates lost free-cluster share against own-cap."""
DEFAULT_PARK_EARLY_LAST_RUNG = False
"""By default the last rung (leaving it pays) waits out its window: start estimates come from time limits and err
late, and on workloads whose limits exceed the durations, leaving the last rung on them sent jobs to GCP that the
free cluster would have started (the sweep in docs/benchmarks.md). Nor did a margin past the window's end (fixed,
or a fraction of the job's time limit) meet both targets: one small enough for the median with exact limits still
sent such jobs to GCP with 10x limits, one large enough to keep them left the median near own-cap's."""


def calibrates(policy: str, *, last_rung: bool) -> bool:
    """Does ``policy`` decide this rung on the cluster's workload (any rung under calibrated, the last under
    calibrated-last)?"""
    return policy == "calibrated" or (policy == "calibrated-last" and last_rung)


def leave_below(policy: str, *, last_rung: bool) -> float:
    """The chance below which ``policy`` leaves this rung: calibrated's own thresholds on its earlier rungs and on
    its last (CALIBRATED_LEAVE_EARLIER_BELOW, CALIBRATED_LEAVE_LAST_BELOW), calibrated-last's on its last."""
    if policy != "calibrated":
        return CALIBRATED_LEAVE_BELOW
    return CALIBRATED_LEAVE_LAST_BELOW if last_rung else CALIBRATED_LEAVE_EARLIER_BELOW


def _clock(at: float, other: float) -> str:
    """``at`` as a local wall-clock time; with its date when it is not on ``other``'s day."""
    day = time.strftime("%Y-%m-%d", time.localtime(at))
    hms = time.strftime("%H:%M:%S", time.localtime(at))
    return hms if day == time.strftime("%Y-%m-%d", time.localtime(other)) else f"{day} {hms}"


@attrs.frozen
class StartChance:
    """The chance a job starts on its rung before the window closes, re-estimated from the cluster's workload."""

    probability: float
    in_the_way: int
    """The running jobs whose ends it waits for."""
    finished_jobs: int
    median_ratio: float
    """The workload's median elapsed/limit."""
    all_users: bool
    window_seconds: float = 0.0
    """What was left of the rung's window (or of the ladder) when the chance was worked out."""
    horizon: str = ""
    """Whose end ``window_seconds`` runs to, as the note says it ("" the rung's window)."""

    @property
    def note(self) -> str:
        """The figures, as the workload shows them (its finished jobs are the note's \"history\")."""
        whose = "" if self.all_users else " (yours only: no other user's job was visible)"
        return (
            f"{round(100 * self.probability)} % chance of a start within {_span(self.window_seconds)}{self.horizon}: "
            f"{self.in_the_way} jobs in the way; history: {self.finished_jobs} jobs{whose}, median elapsed/limit "
            f"{self.median_ratio:.2f}"
        )


def _ends_by(ratios: tuple[float, ...], started: float, limit: float, seen_at: float, by: float) -> float:
    """The chance a job running since ``started`` with time limit ``limit`` has ended by ``by``, given it was still
    running when the workload was read (``seen_at``): its elapsed/limit drawn from the workload's ``ratios``,
    conditioned on what it had run by then. (Not on ``now``: the read may be minutes old, and the job may have
    ended since; a job seen running past every job of the workload runs to its limit, as SLURM plans.)"""
    if by >= started + limit:
        return 1.0  # SLURM ends it at its limit
    ran = max(0.0, seen_at - started) / limit
    left = len(ratios) - bisect.bisect_right(ratios, ran)  # workload's jobs that ran longer than this one had
    if left == 0:
        return 0.0
    ended = bisect.bisect_right(ratios, (by - started) / limit) - bisect.bisect_right(ratios, ran)
    return ended / left


def _span(seconds: float) -> str:
    """A short duration, as a note shows it: ``4m 10s``, ``2h 5m``, ``40s``."""
    s = max(0, round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 60}m {s % 60}s" if s >= 60 else f"{s}s"


def start_chance(
    workload: Workload | None, *, gpus: int, now: float, window_end: float, job_id: str = "", qos: str | None = None
) -> StartChance | None:
    """The chance that enough of the running jobs end by ``window_end`` to free ``gpus`` GPUs; None when the
    workload cannot say (fewer than CALIBRATED_MIN_FINISHED finished jobs, the cluster's GPUs unknown, or running
    jobs hidden from the read).

    Each running job's end is re-estimated from the workload (how far into their limits jobs end, given how long
    this one had run when the workload was read), independently of the others; the job starts once the GPUs that
    end, with those free at the read, hold it and the other users' jobs pending ahead of it (Workload.gpus_ahead_of:
    a higher priority, waiting for resources only). The read may be minutes old: jobs queued since are not counted
    ahead, and jobs that ended since count as ending (the chance errs high: it waits, never pays).
    """
    if workload is None or len(workload.finished) < CALIBRATED_MIN_FINISHED or workload.total_gpus is None:
        return None
    if workload.used_gpus is None or workload.hidden_gpus > 0:
        return None  # the jobs in the way are not all visible (PrivateData): nothing to calibrate
    ratios = workload.ratios
    in_way = [j for j in workload.running if j.limit_seconds is None or j.started_at + j.limit_seconds > now]
    ahead = workload.gpus_ahead_of(job_id, qos)
    need = gpus + ahead - (workload.total_gpus - sum(j.gpus for j in in_way))
    probability = 1.0
    if need > 0:
        # P(the GPUs of the jobs that end reach ``need``): a distribution over freed GPUs, capped at ``need``.
        freed = [1.0] + [0.0] * need
        for job in in_way:
            if job.limit_seconds is None or job.limit_seconds <= 0 or job.gpus <= 0:
                continue  # never ends by a limit (or holds no GPU): frees nothing the plan can count on
            p = _ends_by(ratios, job.started_at, job.limit_seconds, workload.read_at, window_end)
            if p <= 0.0:
                continue
            for k in range(need, -1, -1):
                if freed[k] == 0.0:
                    continue
                up = min(need, k + job.gpus)
                moved = freed[k] * p
                freed[k] -= moved
                freed[up] += moved
        probability = math.fsum(freed[need:])
    return StartChance(
        probability, len(in_way), len(ratios), median(ratios), workload.all_users, max(0.0, window_end - now)
    )


# Module names: every look asks these, and an Enum member read off its class costs a Python call on 3.11.
_PENDING, _HELD, _OWN_CAP = Phase.PENDING, ReasonGroup.HELD, ReasonGroup.OWN_CAP


def park_early_reason(
    policy: str,
    observation: Observation | None,
    window_end: float,
    *,
    last_rung: bool = False,
    last_rung_too: bool = False,
    workload: Workload | None = None,
    gpus: int = 0,
    now: float = 0.0,
    ladder_end: float | None = None,
) -> str | None:
    """Why the job should leave its rung now, before ``window_end``; None to wait (the cap still decides).

    ``observation`` is the fresh look at the job on this rung; ``last_rung``: leaving it hands the job to the paid
    lane. Whether the last rung is left early at all is the caller's choice (``[fellows] park_early_last_rung``,
    ``last_rung_too``), except for the calibrated ones, which are called on the last rung whatever that choice.

    calibrated: on any rung, with a job pending on contention (Resources, Priority) and a workload that can say
    (start_chance), the job leaves when its chance of starting is below CALIBRATED_LEAVE_LAST_BELOW within the last
    rung's window, below CALIBRATED_LEAVE_EARLIER_BELOW on an earlier rung before ``ladder_end`` (the last rung's
    window end; CALIBRATED_EARLIER_HORIZON), and waits otherwise; without such a workload it is exactly own-cap (the
    user's own cap leaves a rung at once, never the last). calibrated-last: the last rung only, below
    CALIBRATED_LEAVE_BELOW, own-cap's on the others (issue 21's policy). ``workload``, ``gpus`` (the job's),
    ``now`` and ``ladder_end`` are read only by these two.

    estimate without an estimate: the user's own per-QoS cap leaves at once, as own-cap does (SLURM 22.05 gives
    no estimate to a job its QoS's per-user limit holds back, even when the jobs in the way have time limits: N/A
    in squeue's %S and StartTime, scontrol and squeue --start alike, scripts/measure-start-estimate; and the next
    rung's budget is free now); any other reason waits for the cap (N/A there is a job the backfill has not
    planned yet). An estimate at or before the window's end keeps the job (it is expected to start in time),
    whatever the reason.
    """
    if policy == "off" or observation is None or observation.phase is not _PENDING:
        return None
    group = observation.reason_group
    if group is _HELD:
        return None  # someone's decision: never walked away from
    where = "the paid lane" if last_rung else "the next rung"
    own_cap = group is _OWN_CAP
    if policy in CALIBRATED:
        if (last_rung or policy == "calibrated") and group is ReasonGroup.CONTENTION:
            whole = not last_rung and ladder_end is not None and CALIBRATED_EARLIER_HORIZON == "ladder"
            end = ladder_end if whole and ladder_end is not None else window_end
            chance = start_chance(
                workload, gpus=gpus, now=now, window_end=end, job_id=observation.job_id, qos=observation.qos
            )
            if chance is not None and whole:
                chance = attrs.evolve(chance, horizon=" (to the ladder's end, on this rung)")
            if chance is not None:
                if chance.probability < leave_below(policy, last_rung=last_rung):
                    return f"{chance.note}; leaving for {where}"
                return None
        if last_rung and not last_rung_too:
            return None  # too little workload (or none that can say): exactly own-cap, which waits here
        policy = "own-cap"
    if policy == "own-cap":
        if own_cap:
            return f"{observation.reason}: your own jobs fill this QoS's per-user cap; leaving for {where}"
        return None
    expected = observation.expected_start
    if expected is None and own_cap:
        return f"{observation.reason} and SLURM gives no start estimate; leaving for {where}"
    if expected is None or expected <= window_end:
        return None
    return f"start estimated {_clock(expected, window_end)}, window ends {_clock(window_end, expected)}"
