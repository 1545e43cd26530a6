"""SLURM's backfill plan on the simulated cluster: each pending job's start estimate (squeue's StartTime).

Computed as SLURM's backfill scheduler computes it: from time limits, not from the real durations (so it errs
late when limits exceed durations), placing the pending jobs in priority order at the earliest time their GPUs
and their QoS's per-user cap allow, each with a reservation, up to BACKFILL_WINDOW_SECONDS ahead.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence

from fellows_fsm.sim.jobs import SimJob, Tier

__all__ = ["BACKFILL_WINDOW_SECONDS", "plan_starts"]

BACKFILL_WINDOW_SECONDS = 86_400.0
"""How far ahead the backfill scheduler plans (SLURM's bf_window, 1 day by default): a job it cannot place
within it shows no start estimate (N/A)."""


def plan_starts(
    pending: Sequence[SimJob],
    running: Iterable[SimJob],
    tiers: Mapping[str, Tier],
    *,
    now: float,
    gpus: int,
    used_gpus: int,
) -> None:
    """Set the start estimate of every job of ``pending`` (highest priority first) on a cluster of ``gpus`` GPUs,
    ``used_gpus`` of them held by the ``running`` jobs.

    The backfill's plan: running jobs end at their start plus their time limit (a job without one never
    ends); each pending job, highest priority first, is reserved at the earliest time from now on when both
    the free GPUs and its QoS's per-user cap hold it for its whole time limit.
    """
    free = _Profile(now, gpus - used_gpus)
    held: dict[tuple[str, str], _Profile] = {}
    for job in running:
        mine = held.setdefault((job.user, job.qos), _Profile(now, 0))
        if job.time_limit is None or job.start_time is None:
            mine.add(now, math.inf, job.gpus)
            continue
        end = max(now, job.start_time + job.time_limit)
        free.add(end, math.inf, job.gpus)
        mine.add(now, end, job.gpus)
    for job in pending:
        job.expected_start = None
        tier = tiers[job.qos]
        cap = tier.max_gpus_per_user
        if job.reason == "QOSMaxWallDurationPerJobLimit" or job.gpus > gpus or (cap is not None and job.gpus > cap):
            continue
        mine = held.setdefault((job.user, job.qos), _Profile(now, 0))
        length = math.inf if job.time_limit is None else job.time_limit
        for at in sorted({*free.times, *mine.times}):
            if at > now + BACKFILL_WINDOW_SECONDS:
                break
            if free.least(at, at + length) >= job.gpus and (
                cap is None or mine.most(at, at + length) + job.gpus <= cap
            ):
                if job.reason == "QOSMaxGRESPerUser":
                    # As SLURM (22.05.8, 24.11.5): the per-user limit is checked after node selection, so a
                    # job the free GPUs could take now reads N/A, while one whose GPUs are busy too gets the
                    # planned start (the end of the time limits in the way); neither gets a reservation.
                    job.expected_start = at if gpus - used_gpus < job.gpus else None
                    break
                job.expected_start = at
                free.add(at, at + length, -job.gpus)
                mine.add(at, at + length, job.gpus)
                break


class _Profile:
    """A step function of time from ``start`` on (GPUs free, or GPUs one user holds on one QoS)."""

    def __init__(self, start: float, value: int) -> None:
        self.times: list[float] = [start]
        self.values: list[int] = [value]

    def _split(self, at: float) -> int:
        """The index of the step that begins at ``at`` (inserted if needed)."""
        i = bisect.bisect_right(self.times, at) - 1
        if self.times[i] == at:
            return i
        self.times.insert(i + 1, at)
        self.values.insert(i + 1, self.values[i])
        return i + 1

    def add(self, start: float, end: float, delta: int) -> None:
        """Add ``delta`` over ``[start, end)`` (``end`` may be infinite)."""
        if end <= start:
            return
        first = self._split(max(start, self.times[0]))
        last = len(self.times) if math.isinf(end) else self._split(end)
        for i in range(first, last):
            self.values[i] += delta

    def _over(self, start: float, end: float) -> list[int]:
        i = max(0, bisect.bisect_right(self.times, start) - 1)
        out = []
        while i < len(self.times) and self.times[i] < end:
            out.append(self.values[i])
            i += 1
        return out

    def least(self, start: float, end: float) -> int:
        """The smallest value over ``[start, end)``."""
        return min(self._over(start, end))

    def most(self, start: float, end: float) -> int:
        """The largest value over ``[start, end)``."""
        return max(self._over(start, end))
