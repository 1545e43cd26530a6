"""A seeded workload drawn from real SLURM data: the ``real-graham`` workload of ``fellows-fsm simulate``.

The numbers below were derived by ``python -m benchmarks.real_data derive --cluster graham`` from the GPU jobs of
mila-iqia/slurm-queue-time-pred (MIT licence; Graham, Digital Research Alliance of Canada, May-June 2021: noon
snapshots of the jobs not yet finished, 11,105 GPU jobs that ran at least a minute). They are kept here as the
numbers they are; the data itself is not part of the project (docs/benchmarks.md says what the snapshot bias does).
"""

from __future__ import annotations

import math
import random

from fellows_fsm.sim.trace import ME, QOS_MAX_WALL_SECONDS, TraceJob

__all__ = ["GRAHAM_2021", "REAL_LOAD", "WORKLOADS", "real_trace"]

GRAHAM_2021 = {
    "gpus": ((1, 0.8666), (2, 0.0405), (3, 0.0012), (4, 0.0881), (8, 0.0032)),
    # run time, seconds: min, the 5 %, 10 %, ..., 95 % quantiles, max
    "run_seconds": (
        60, 200, 457, 1707, 2331, 2726, 3133, 3773, 4464, 5828, 7770,
        13123, 17143, 25087, 26680, 27036, 27307, 27575, 28630, 68250, 1553413,
    ),
    # time limit over run time, the same quantiles
    "limit_over_run": (
        0.779, 1.0, 1.346, 1.85, 2.571, 2.994, 3.119, 3.153, 3.183, 3.219, 3.294,
        3.508, 4.973, 8.606, 10.819, 13.9, 20.465, 27.855, 100.162, 407.264, 3840.0,
    ),
    # the limits at least 1 % of jobs asked for (seconds, share); 91.4 % of jobs asked for one of them
    "round_limits": (
        (4800, 0.033), (7200, 0.051), (10740, 0.027), (10800, 0.027), (25200, 0.043), (32400, 0.027),
        (36000, 0.082), (43200, 0.164), (64800, 0.024), (86340, 0.36), (86400, 0.021), (259200, 0.055),
    ),
    "limits_at_round_values": 0.914,
    "arrivals_per_hour": 7.59,  # in the snapshots; the real rate is higher (jobs that ended before noon are missing)
}  # fmt: skip
"""Graham's GPU jobs, as ``benchmarks.real_data derive`` prints them."""
REAL_LOAD = 2.0
"""The others' offered GPU load of ``real-graham``. Graham's GPU jobs waited a median of 7.9 h once eligible (the
week measured in issue 28): most jobs there wait. With the data's long-tailed run times, at offers of 1.2 and 1.5
of the GPUs my median job started at once under own-cap on 3-4 of 5 seeds (the ladder decided nothing); 2.0 is
the lowest offer tried at which it waited on every seed of five (own-cap's median 362-1800 s at the 600 s cap),
and at 3.0 it waited out the whole ladder on every seed (docs/benchmarks.md, issue 28)."""
WORKLOADS = ("synthetic", "real-graham")
"""The built-in workloads of ``fellows-fsm simulate --workload``."""


def _draw(table: tuple[float, ...], u: float) -> float:
    """The value at quantile ``u`` of evenly spaced quantiles, interpolated in log space."""
    x = u * (len(table) - 1)
    i = min(int(x), len(table) - 2)
    lo, hi = math.log(table[i]), math.log(table[i + 1])
    return math.exp(lo + (hi - lo) * (x - i))


def _job(rng: random.Random, qos: str, table: dict[str, object]) -> tuple[int, float, float]:
    """GPUs, run time and time limit of one job drawn from ``table`` (a limit at least the run time, rounded up to
    the round value above it as often as the data's jobs were, at most the QoS's MaxWall)."""
    sizes = table["gpus"]
    assert isinstance(sizes, tuple)
    gpus = rng.choices([g for g, _ in sizes], [w for _, w in sizes])[0]
    wall = QOS_MAX_WALL_SECONDS.get(qos, 7 * 86_400.0)
    run = min(wall, _draw(table["run_seconds"], rng.random()))  # type: ignore[arg-type]
    wanted = run * max(1.0, _draw(table["limit_over_run"], rng.random()))  # type: ignore[arg-type]
    limit = math.ceil(wanted / 60.0) * 60.0
    if rng.random() < float(table["limits_at_round_values"]):  # type: ignore[arg-type]
        limit = next((float(v) for v, _ in table["round_limits"] if v >= wanted), limit)  # type: ignore[attr-defined]
    return gpus, round(run), max(round(run), min(limit, wall))


def real_trace(
    *,
    seed: int = 1,
    hours: float = 48.0,
    gpus: int = 64,
    background_load: float = REAL_LOAD,
    background_users: int = 6,
    burst_every_hours: float = 3.0,
    table: dict[str, object] = GRAHAM_2021,
) -> tuple[TraceJob, ...]:
    """A seeded workload shaped as ``synthetic_trace`` (others' load offered at ``background_load`` of the GPUs,
    Poisson arrivals; my bursts of 3-6 jobs every ``burst_every_hours`` on average), every job's GPUs, run time and
    time limit drawn from ``table``. Arrivals are flat in time: the snapshots' hour of day is an artefact of
    their noon cut, not a daily cycle."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    horizon = hours * 3600.0
    probe = random.Random(0)  # noqa: S311 - the same probe every time
    mean_gpu_seconds = sum(g * r for g, r, _ in (_job(probe, "normal-eur", table) for _ in range(4000))) / 4000
    rate = background_load * gpus / mean_gpu_seconds
    qos_names, qos_weights = ("normal-eur", "low-eur", "high-eur"), (5, 3, 2)
    raw: list[tuple[float, int, float, float, str, str | None]] = []
    t = 0.0
    while (t := t + rng.expovariate(rate)) < horizon:
        qos = rng.choices(qos_names, qos_weights)[0]
        size, run, limit = _job(rng, qos, table)
        raw.append((round(t, 1), size, run, limit, f"user{rng.randrange(background_users) + 1}", qos))
    t = 3600.0  # let the background fill the cluster first
    while (t := t + rng.expovariate(1 / (burst_every_hours * 3600.0))) < horizon:
        for k in range(rng.randint(3, 6)):
            size, run, limit = _job(rng, "high-eur", table)
            raw.append((round(t + 10.0 * k, 1), size, run, limit, ME, None))
    raw.sort(key=lambda r: r[0])
    return tuple(
        TraceJob(index=i, submit_at=at, gpus=size, duration=run, user=user, qos=qos, time_limit=limit)
        for i, (at, size, run, limit, user, qos) in enumerate(raw)
    )
