"""The simulated cluster's values: its QoS tiers (priority, per-user GPU cap, MaxWall) and the jobs in its queue.

``FELLOWS_TIERS`` are the tiers scripts/dev-slurm creates; ``parse_tier`` reads one from the command line.
"""

from __future__ import annotations

import attrs

from fellows_fsm.errors import ConfigError
from fellows_fsm.scheduler.port import JobEnd, Observation, Phase

__all__ = ["FELLOWS_TIERS", "SimJob", "Tier", "parse_tier"]

_DAY = 86_400


@attrs.frozen
class Tier:
    """One QoS: its priority, its per-user GPU cap (None: no cap) and its MaxWall (None: none)."""

    name: str
    priority: int
    max_gpus_per_user: int | None = None
    max_wall_seconds: int | None = None


FELLOWS_TIERS = (
    Tier("high-eur", 100_000, 16, 7 * _DAY),
    Tier("normal-eur", 50_000, 16, 7 * _DAY),
    Tier("low-eur", 10_000, None, 14 * _DAY),
    Tier("dev-eur", 200_000, 8, 1 * _DAY),
)
"""The fellows tiers as scripts/dev-slurm creates them (see ../shared/slurm-lab.md, beside the repository)."""


def parse_tier(text: str) -> Tier:
    """A tier from ``NAME:PRIORITY:CAP`` (CAP ``-`` for no per-user GPU cap), e.g. ``high-eur:100000:16``."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not (parts[2] == "-" or parts[2].isdigit()):
        raise ConfigError(f"tier {text!r} is not NAME:PRIORITY:CAP, e.g. 'high-eur:100000:16' or 'low-eur:10000:-'")
    return Tier(parts[0], int(parts[1]), None if parts[2] == "-" else int(parts[2]))


# Mutable on purpose: a job moves from PENDING to RUNNING to COMPLETED as simulated time passes.
@attrs.define(eq=False)
class SimJob:
    """One job in the simulated queue."""

    job_id: str
    user: str
    qos: str
    gpus: int
    duration: float
    submitted_at: float
    seq: int
    """Submission order, the tie-break after priority and submit time."""
    time_limit: float | None = None
    token: str = ""
    deadline: float | None = None
    state: str = "PENDING"
    reason: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    expected_start: float | None = None
    """The backfill scheduler's start estimate while pending (set by SimCluster when the job is observed)."""

    def observe(self) -> Observation:
        """This job as squeue would report it."""
        if self.state == "PENDING":
            phase = Phase.PENDING
        elif self.start_time is not None:
            phase = Phase.STARTED
        else:
            phase = Phase.GONE
        return Observation(
            job_id=self.job_id,
            phase=phase,
            state=self.state,
            reason=self.reason if self.state == "PENDING" else None,
            qos=self.qos,
            start_time=self.start_time,
            expected_start=self.expected_start if self.state == "PENDING" else None,
            end=self._end(),
        )

    def _end(self) -> JobEnd | None:
        """How it ended, as accounting says (a completed run: exit 0, its duration, its GPUs)."""
        if self.state != "COMPLETED" or self.start_time is None:
            return None
        ended = self.end_time if self.end_time is not None else self.start_time + self.duration
        return JobEnd("COMPLETED", 0, ended - self.start_time, self.gpus, ended)
