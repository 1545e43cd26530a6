"""Words a user reads: times, durations, GPU counts and SLURM's pending reasons in plain English.

Pure functions of their arguments; local time is used only where a person reads a clock. (``iso_utc``, the JSON
form of a time, lives in clock.py and is re-exported here.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime

from fellows_fsm.scheduler.port import ReasonGroup, classify_reason

__all__ = ["clock", "explain_reason", "gpu_words", "short_when", "span"]


def clock(at: float) -> str:
    """Local wall-clock time of ``at``, e.g. ``12:00:05``."""
    return datetime.fromtimestamp(at).strftime("%H:%M:%S")  # local time: what users read


def short_when(at: float, today: str) -> str:
    """``23:37:24`` today (``today`` as ``YYYY-MM-DD``), ``11-30 23:37`` on another day."""
    moment = datetime.fromtimestamp(at)
    return moment.strftime("%H:%M:%S") if moment.strftime("%Y-%m-%d") == today else moment.strftime("%m-%d %H:%M")


def span(seconds: float) -> str:
    """A duration for people: ``12s``, ``4m 05s``, ``1h 02m 03s``, ``2d 03h 00m`` (rounded up to the second)."""
    total = max(0, math.ceil(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h {minutes:02d}m"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def gpu_words(count: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


_GROUP_WORDS: Mapping[ReasonGroup, str] = {
    ReasonGroup.NOT_EVALUATED: "queued; SLURM has not looked at it yet",
    ReasonGroup.OWN_CAP: "your own {qos} limit is reached; it clears when your jobs on {qos} end",
    ReasonGroup.SHARED_CAP: "the {qos} group limit, shared with other users, is full; the next rung may share it",
    ReasonGroup.CONTENTION: "waiting for free resources on the cluster",
    ReasonGroup.NEVER_FITS: "{qos} can never start this job; moving to the next rung",
    ReasonGroup.INVALID: "the cluster refuses {qos} for this job; moving to the next rung",
    ReasonGroup.HELD: "held; it will not start until released (scontrol release {job})",
    ReasonGroup.WAITING: "waiting for a dependency or a begin time",
    ReasonGroup.OTHER: "pending",
}
_REASON_WORDS: Mapping[str, str] = {
    "QOSMaxGRESPerUser": "your own {qos} GPU cap is full; it clears when your GPU jobs on {qos} end",
    "Resources": "waiting for free GPUs on the nodes",
    "Priority": "waiting behind higher-priority jobs",
    "QOSMaxWallDurationPerJobLimit": "the job's --time is over the MaxWall of {qos}; it can never start there",
    "QOSGrpGRES": "the shared GPU pool of {qos} is full (all users)",
    "AssocGrpGRES": "your account's GPU budget is full; every rung shares it",
    "PartitionDown": "its partition is down (an admin closed it); it waits for it to open, within this rung's window",
    "PartitionInactive": "the job's partition is not active (an admin's setting); it waits within this rung's window",
    "NodeDown": "a node the job needs is down; it waits for the node, within this rung's window",
}


def explain_reason(reason: str | None, qos: str | None = None, job_id: str | None = None) -> str:
    """A SLURM pending reason in plain words, e.g. QOSMaxGRESPerUser on high-eur -> ``your own high-eur GPU cap
    is full; ...``."""
    values = {"qos": qos or "this QoS", "job": job_id or "<job>"}
    if reason is not None and reason in _REASON_WORDS:
        return _REASON_WORDS[reason].format_map(values)
    return _GROUP_WORDS[classify_reason(reason)].format_map(values)
