"""SLURM's field values as its commands print them: durations (``D-HH:MM:SS`` and its short forms), timestamps
(in UTC: the runner runs every client with ``TZ=UTC``) and the GPU count of a TRES list (``gres/gpu=N``). Pure
functions, shared by accounting, observation, scripts and history.
"""

from __future__ import annotations

import calendar
import re
import time

__all__ = ["gpu_count", "parse_duration", "parse_utc", "utc_stamp"]

_STAMP = "%Y-%m-%dT%H:%M:%S"

_DURATION = re.compile(r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")
# gres/gpu=N counts every GPU; gres/gpu:<type>=N counts one model only and is not a cap on all GPUs.
_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(?P<n>\d+)(?:,|$)")


def parse_duration(text: str) -> int | None:
    """A SLURM duration as seconds; None for an empty or unlimited value.

    Forms: ``D-HH:MM:SS``, ``D-HH:MM``, ``D-HH``, ``HH:MM:SS``, ``MM:SS``, ``MM`` (SLURM's own reading).
    """
    text = text.strip()
    if text in ("", "UNLIMITED", "INFINITE", "Partition_Limit", "None"):
        return None
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a SLURM duration: {text!r}")
    days = int(match["days"] or 0)
    parts = [int(p) for p in (match["a"], match["b"], match["c"]) if p is not None]
    if match["days"] is not None:
        # With days: D-HH, D-HH:MM, D-HH:MM:SS.
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 3:
        hours, minutes, seconds = parts
    elif len(parts) == 2:
        hours, (minutes, seconds) = 0, parts
    else:
        hours, minutes, seconds = 0, parts[0], 0
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def gpu_count(tres: str) -> int | None:
    """The ``gres/gpu=N`` count in a TRES list such as ``cpu=4,gres/gpu=16``, or None if absent."""
    match = _GPU_TRES.search(tres.strip())
    return int(match["n"]) if match else None


def utc_stamp(epoch_seconds: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` in UTC: how a time is given to a SLURM client run with ``TZ=UTC``."""
    return time.strftime(_STAMP, time.gmtime(epoch_seconds))


def parse_utc(text: str) -> float | None:
    """A ``YYYY-MM-DDTHH:MM:SS`` stamp printed by a SLURM client run with ``TZ=UTC``, as epoch seconds; None for
    anything else (N/A, Unknown, None)."""
    try:
        return float(calendar.timegm(time.strptime(text.strip(), _STAMP)))
    except ValueError:
        return None
