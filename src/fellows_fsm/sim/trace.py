"""Workloads for the simulator: a JSON-lines trace file, or a seeded synthetic workload.

A trace line is one job: ``submit_at`` and ``duration`` in seconds, ``gpus``, ``user`` (``me`` is the
dispatching user, any other name is background load), optional ``intent`` (me) or ``qos`` (others), and an
optional ``time_limit`` (seconds, at least the duration; default the duration): what SLURM's start estimates
are computed from, as the backfill scheduler computes them (a job ends at its duration, never later).
Every bad line is refused with its line number and the offending key; nothing here runs a simulation.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from fellows_fsm.errors import TraceError

__all__ = [
    "BACKGROUND_QOS",
    "ME",
    "TRACE_KEYS",
    "TraceJob",
    "dump_trace",
    "load_trace",
    "parse_trace",
    "realistic_time_limits",
    "synthetic_trace",
    "with_time_limits",
]

ME = "me"
"""The ``user`` of the dispatching user's jobs; every other user is background load."""
BACKGROUND_QOS = "normal-eur"
"""The QoS of a background job without ``qos`` (the fellows accounts' DefaultQOS)."""
TRACE_KEYS = ("submit_at", "gpus", "duration", "user", "intent", "qos", "time_limit")
_REQUIRED = ("submit_at", "gpus", "duration", "user")
_INTENTS = ("prod", "debug")


@attrs.frozen
class TraceJob:
    """One job of a workload, as the trace gives it."""

    index: int
    """Position in the trace (0-based), stable across strategies."""
    submit_at: float
    """Seconds after the start of the simulation."""
    gpus: int
    duration: float
    """How long the job runs once started, in seconds."""
    user: str
    intent: str = "prod"
    """The dispatch intent of one of my jobs (``prod`` or ``debug``)."""
    qos: str | None = None
    """The QoS of a background job (None: BACKGROUND_QOS); my jobs get theirs from the strategy."""
    time_limit: float | None = None
    """The job's time limit in seconds (None: the duration); SLURM's start estimates are computed from it."""

    @property
    def limit(self) -> float:
        """The time limit SLURM's estimates use: ``time_limit``, else the duration."""
        return self.duration if self.time_limit is None else self.time_limit

    @property
    def mine(self) -> bool:
        """True for a job of the dispatching user."""
        return self.user == ME

    @property
    def gpu_hours(self) -> float:
        """GPUs times duration, in hours."""
        return self.gpus * self.duration / 3600.0

    def to_json(self) -> dict[str, object]:
        """The trace line of this job (keys with default values left out)."""
        line: dict[str, object] = {
            "submit_at": self.submit_at,
            "gpus": self.gpus,
            "duration": self.duration,
            "user": self.user,
        }
        if self.mine and self.intent != "prod":
            line["intent"] = self.intent
        if self.qos is not None:
            line["qos"] = self.qos
        if self.time_limit is not None:
            line["time_limit"] = self.time_limit
        return line


def _number(where: str, key: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TraceError(f"{where}: key {key!r} is {value!r}, not a number of seconds")
    if value < 0 or (positive and value == 0):
        bound = "positive" if positive else "zero or more"
        raise TraceError(f"{where}: key {key!r} is {value!r}; it must be {bound}")
    return float(value)


def _job(where: str, index: int, data: object) -> TraceJob:
    if not isinstance(data, dict):
        raise TraceError(f'{where}: a trace line must be a JSON object such as {{"submit_at": 0, ...}}')
    for key in data:
        if key not in TRACE_KEYS:
            raise TraceError(f"{where}: key {key!r} is not known; a trace line has {', '.join(TRACE_KEYS)}")
    for key in _REQUIRED:
        if key not in data:
            raise TraceError(f"{where}: key {key!r} is missing; every line needs {', '.join(_REQUIRED)}")
    gpus = data["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise TraceError(f"{where}: key 'gpus' is {gpus!r}; it must be a whole number of GPUs, 0 or more")
    user = data["user"]
    if not isinstance(user, str) or not user.strip():
        raise TraceError(f"{where}: key 'user' is {user!r}; give a user name, 'me' for the dispatching user")
    intent = data.get("intent", "prod")
    if intent not in _INTENTS:
        raise TraceError(f"{where}: key 'intent' is {intent!r}; use 'prod' or 'debug'")
    if user != ME and "intent" in data:
        raise TraceError(f"{where}: key 'intent' is only for user 'me' (background jobs take 'qos')")
    qos = data.get("qos")
    if qos is not None and (not isinstance(qos, str) or not qos):
        raise TraceError(f"{where}: key 'qos' is {qos!r}; give a QoS name such as 'low-eur'")
    if user == ME and qos is not None:
        raise TraceError(f"{where}: key 'qos' is only for background users: the strategy picks my jobs' QoS")
    duration = _number(where, "duration", data["duration"], positive=True)
    time_limit = None
    if "time_limit" in data:
        time_limit = _number(where, "time_limit", data["time_limit"], positive=True)
        if time_limit < duration:
            raise TraceError(
                f"{where}: key 'time_limit' is {data['time_limit']!r}, under the duration {data['duration']!r}; "
                "SLURM ends a job at its time limit, so give a time_limit of at least the duration"
            )
    return TraceJob(
        index=index,
        submit_at=_number(where, "submit_at", data["submit_at"], positive=False),
        gpus=gpus,
        duration=duration,
        user=user,
        intent=str(intent),
        qos=qos,
        time_limit=time_limit,
    )


def parse_trace(lines: Iterable[str], *, source: str = "<trace>") -> tuple[TraceJob, ...]:
    """Parse JSON lines (blank lines skipped); jobs keep file order, ``index`` counts jobs from 0."""
    jobs: list[TraceJob] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        jobs.append(_job(where, len(jobs), data))
    if not jobs:
        raise TraceError(f"{source}: the trace holds no job")
    return tuple(jobs)


def load_trace(path: Path | str) -> tuple[TraceJob, ...]:
    """Read a JSON-lines trace file; every bad line raises TraceError naming the line and the key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"trace {path} cannot be read: {exc.strerror or exc}") from None
    return parse_trace(text.splitlines(), source=str(path))


def dump_trace(jobs: Sequence[TraceJob]) -> str:
    """The JSON-lines text of ``jobs`` (what ``load_trace`` reads back)."""
    return "".join(json.dumps(job.to_json()) + "\n" for job in jobs)


def synthetic_trace(
    *,
    seed: int = 1,
    hours: float = 48.0,
    gpus: int = 64,
    background_load: float = 0.4,
    background_users: int = 6,
    burst_every_hours: float = 3.0,
) -> tuple[TraceJob, ...]:
    """A seeded workload where my bursts of 8-GPU jobs saturate high-eur's 16-GPU per-user cap.

    Background: ``background_users`` others offer ``background_load`` of the cluster's GPU time (jobs of
    1-8 GPUs, 10 min to 6 h, QoS mostly normal-eur and low-eur). Mine: every ``burst_every_hours`` on
    average, a burst of 3-6 jobs of 8 GPUs (24-48 GPUs against a 16-GPU cap), 1-3 h each.
    """
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    horizon = hours * 3600.0
    raw: list[tuple[float, int, float, str, str | None]] = []
    sizes, size_weights = (1, 2, 4, 8), (3, 3, 2, 2)
    mean_gpus = sum(s * w for s, w in zip(sizes, size_weights, strict=True)) / sum(size_weights)
    mean_duration = 3600.0 * 1.5
    rate = background_load * gpus / (mean_gpus * mean_duration)  # arrivals per second
    qos_names, qos_weights = ("normal-eur", "low-eur", "high-eur"), (5, 3, 2)
    t = 0.0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= horizon:
            break
        size = rng.choices(sizes, size_weights)[0]
        duration = min(6 * 3600.0, max(600.0, rng.expovariate(1 / mean_duration)))
        user = f"user{rng.randrange(background_users) + 1}"
        raw.append((round(t, 1), size, round(duration), user, rng.choices(qos_names, qos_weights)[0]))
    t = 3600.0  # let the background fill the cluster first
    while True:
        t += rng.expovariate(1 / (burst_every_hours * 3600.0))
        if t >= horizon:
            break
        for k in range(rng.randint(3, 6)):
            raw.append((round(t + 10.0 * k, 1), 8, round(rng.uniform(3600.0, 3 * 3600.0)), ME, None))
    raw.sort(key=lambda r: r[0])
    return tuple(
        TraceJob(index=i, submit_at=at, gpus=size, duration=duration, user=user, qos=qos)
        for i, (at, size, duration, user, qos) in enumerate(raw)
    )


def with_time_limits(jobs: Sequence[TraceJob], factor: float) -> tuple[TraceJob, ...]:
    """``jobs`` with every time limit ``factor`` times the real duration (estimates that err late by that much)."""
    if not math.isfinite(factor) or factor < 1:
        raise TraceError(f"time-limit factor {factor!r} must be at least 1 (a job never runs past its limit)")
    return tuple(attrs.evolve(j, time_limit=j.duration * factor) for j in jobs)


ROUND_LIMITS_HOURS = (1, 2, 4, 6, 8, 12, 24, 48, 72)
"""The round values users write as ``--time`` (about 20 distinct values cover 90 % of jobs on real sites)."""
QOS_MAX_WALL_SECONDS = {"high-eur": 7 * 86_400.0, "normal-eur": 7 * 86_400.0, "low-eur": 14 * 86_400.0}
"""The fellows tiers' MaxWall: what a user who asks for "as long as allowed" gets."""


def realistic_time_limits(
    jobs: Sequence[TraceJob], *, seed: int = 1, at_max: float = 0.03, median_factor: float = 3.0
) -> tuple[TraceJob, ...]:
    """``jobs`` with time limits as users set them, from the field figures (docs/benchmarks.md cites them).

    A share ``at_max`` asks for the QoS's maximum (7 days; 14 on low-eur; my jobs: high-eur's 7 days, since they
    walk the ladder from it); the others ask for a multiple of the run time drawn log-normally around
    ``median_factor``, at least 1.2x, rounded up to the next round value of ROUND_LIMITS_HOURS (capped at the QoS's
    maximum). On the built-in workload (seed 1) that asks for 7.8x the time used in all (the field: 6.0x, per user
    3.9-8.2x, Tsafrir JSSPP 2010), 4.1x for the median job, with 10 distinct limits.
    """
    if not 0 <= at_max <= 1:
        raise TraceError(f"at_max={at_max!r} must be a share between 0 and 1")
    rng = random.Random(seed * 7919 + 17)  # noqa: S311 - a reproducible workload, not a secret
    out = []
    for job in jobs:
        cap = QOS_MAX_WALL_SECONDS.get(job.qos or "high-eur", 7 * 86_400.0)
        if rng.random() < at_max:
            limit = cap
        else:
            wanted = job.duration * max(1.2, rng.lognormvariate(math.log(median_factor), 0.6))
            limit = next((3600.0 * h for h in ROUND_LIMITS_HOURS if 3600.0 * h >= wanted), cap)
            limit = min(limit, cap)
        out.append(attrs.evolve(job, time_limit=max(limit, job.duration)))
    return tuple(out)
