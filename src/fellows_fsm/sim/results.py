"""What a simulation gives: every job's outcome (where it ran, how long it waited) and a run's figures over them.

Values only: they are computed by sim/run.py and shown by sim/report.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from fellows_fsm.core.vocab import LADDER_LANE

__all__ = ["GCP", "JobOutcome", "RunResult", "by_index"]

GCP = "gcp"


@attrs.frozen
class JobOutcome:
    """Where one of my jobs ran and how long it waited to start."""

    index: int
    gpus: int
    duration: float
    lane: str
    """``fellows`` (the free cluster) or the name of another free cluster it ran on, ``gcp``, ``unstarted`` (not
    started within the run), or ``rejected``."""
    qos: str | None
    """The QoS it ran on, on a free cluster."""
    start_seconds: float | None
    """Seconds from submission to running (on GCP: to the handoff, plus ``gcp_start_seconds``)."""
    rung_changes: int

    @property
    def gpu_hours(self) -> float:
        """GPUs times duration, in hours."""
        return self.gpus * self.duration / 3600.0


def _quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile with linear interpolation between order statistics; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@attrs.frozen
class RunResult:
    """One strategy at one park cap on one workload: every job's outcome and the figures over them."""

    strategy: str
    park_cap_seconds: float
    outcomes: tuple[JobOutcome, ...]
    clusters: tuple[str, ...] = (LADDER_LANE,)
    """The free clusters of the run, in the order a dispatch walks them (fellows first)."""

    @property
    def free_share(self) -> float:
        """Share of my GPU-hours that ran on a free cluster (any of ``clusters``)."""
        total = math.fsum(o.gpu_hours for o in self.outcomes)
        free = math.fsum(o.gpu_hours for o in self.outcomes if o.lane in self.clusters)
        return free / total if total > 0 else 0.0

    @property
    def starts(self) -> dict[str, int]:
        """How many of my jobs started on each free cluster, in order, then on GCP."""
        return {lane: sum(1 for o in self.outcomes if o.lane == lane) for lane in (*self.clusters, GCP)}

    @property
    def gcp_gpu_hours(self) -> float:
        """GPU-hours handed to GCP."""
        return math.fsum(o.gpu_hours for o in self.outcomes if o.lane == GCP)

    @property
    def start_seconds(self) -> tuple[float, ...]:
        """Time-to-start of every job that started (free cluster or GCP)."""
        return tuple(o.start_seconds for o in self.outcomes if o.start_seconds is not None)

    @property
    def p50_start_seconds(self) -> float | None:
        """Median time-to-start."""
        return _quantile(self.start_seconds, 0.5)

    @property
    def p95_start_seconds(self) -> float | None:
        """95th percentile of time-to-start."""
        return _quantile(self.start_seconds, 0.95)

    @property
    def rung_changes(self) -> int:
        """Cancel-and-resubmit moves, over every job."""
        return sum(o.rung_changes for o in self.outcomes)

    @property
    def unstarted(self) -> int:
        """Jobs that neither started nor went to GCP within the run."""
        return sum(1 for o in self.outcomes if o.lane in ("unstarted", "rejected"))


def by_index(result: RunResult) -> Mapping[int, JobOutcome]:
    """A run's outcomes by trace index."""
    return {o.index: o for o in result.outcomes}
