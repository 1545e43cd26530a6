"""Shared helpers for the benchmarks: the machine's description, min/median/max, and the result file.

Every benchmark writes one JSON file under benchmarks/results/ with the command that made it, the date
and the machine, so every figure in docs/benchmarks.md can be traced to a rerunnable run.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
NOTES = Path(__file__).resolve().parent / "notes"
"""What docs/benchmarks.md says that no kept result holds (runs whose JSON was not kept, profiles, the reading of
the figures), written by hand once and placed by benchmarks/render.py where it belongs."""


def note(name: str) -> list[str]:
    """The lines of ``benchmarks/notes/<name>.md``, for the render to place."""
    return [*(NOTES / f"{name}.md").read_text(encoding="utf-8").rstrip("\n").split("\n"), ""]


def machine() -> dict[str, Any]:
    """nproc, uname -m, the Python version and the kernel, for the docs' machine line."""
    return {
        "nproc": os.cpu_count(),
        "uname_m": platform.machine(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float | int]:
    """min / median / max (and the count) of ``values``."""
    return {
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def percentiles(values: Sequence[float], digits: int = 3) -> dict[str, float | int]:
    """p50 / p95 / max (linear interpolation) and the count of ``values``."""
    ordered = sorted(values)

    def q(p: float) -> float:
        pos = (len(ordered) - 1) * p
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return {
        "p50": round(q(0.5), digits),
        "p95": round(q(0.95), digits),
        "max": round(ordered[-1], digits),
        "n": len(ordered),
    }


def rss_mb() -> dict[str, float]:
    """This process's resident set now (VmRSS) and its peak (ru_maxrss), in MB."""
    current = 0.0
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rss_mb": round(current, 1), "peak_rss_mb": round(peak, 1)}


def write_result(name: str, data: dict[str, Any], *, module: str | None = None) -> Path:
    """Write ``benchmarks/results/<name>.json`` with the command (``module``, default ``name``), date and machine."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = {
        "benchmark": name,
        "command": " ".join(
            shlex.quote(a) for a in [".venv/bin/python", "-m", f"benchmarks.{module or name}", *sys.argv[1:]]
        ),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        # scripts/in-netns NAME sets it to /tmp/fellows-slurm-NAME: a cluster of its own, not the shared one.
        "slurm_runtime": os.environ.get("FELLOWS_SLURM_RUNTIME"),
        **data,
    }
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
