"""Turn simulation results into a text table or JSON, for the CLI and the benchmarks to show.

It formats values only: it never runs a simulation and never prints.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence

from fellows_fsm.sim.results import GCP, RunResult

__all__ = ["RESULT_KEYS", "format_table", "oracle_ratio", "to_json", "to_records"]

RESULT_KEYS = (
    "strategy",
    "park_cap_seconds",
    "free_share",
    "p50_start_seconds",
    "p95_start_seconds",
    "gcp_gpu_hours",
    "rung_changes",
)
"""The keys every JSON record has, in this order; ``free_share_vs_oracle``, ``jobs`` and ``unstarted`` follow (and,
with more free clusters than fellows, ``clusters`` and ``starts``: my jobs started on each, then on GCP)."""


def oracle_ratio(result: RunResult, results: Sequence[RunResult]) -> float | None:
    """``result``'s free-cluster share over the oracle's at the same park cap (None without an oracle run)."""
    for other in results:
        if other.strategy == "oracle" and other.park_cap_seconds == result.park_cap_seconds:
            return result.free_share / other.free_share if other.free_share > 0 else None
    return None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def to_records(results: Sequence[RunResult], *, per_job: bool = False) -> list[dict[str, object]]:
    """One JSON-ready record per result (with every job's outcome when ``per_job``)."""
    records: list[dict[str, object]] = []
    for r in results:
        record: dict[str, object] = {
            "strategy": r.strategy,
            "park_cap_seconds": r.park_cap_seconds,
            "free_share": round(r.free_share, 4),
            "p50_start_seconds": _round(r.p50_start_seconds, 1),
            "p95_start_seconds": _round(r.p95_start_seconds, 1),
            "gcp_gpu_hours": round(r.gcp_gpu_hours, 2),
            "rung_changes": r.rung_changes,
            "free_share_vs_oracle": _round(oracle_ratio(r, results), 4),
            "jobs": len(r.outcomes),
            "unstarted": r.unstarted,
        }
        if len(r.clusters) > 1:
            record["clusters"] = list(r.clusters)
            record["starts"] = r.starts
        if per_job:
            record["outcomes"] = [
                {
                    "index": o.index,
                    "gpus": o.gpus,
                    "duration": o.duration,
                    "lane": o.lane,
                    "qos": o.qos,
                    "start_seconds": _round(o.start_seconds, 2),
                    "rung_changes": o.rung_changes,
                }
                for o in r.outcomes
            ]
        records.append(record)
    return records


def to_json(results: Sequence[RunResult], *, per_job: bool = False) -> str:
    """The results as a JSON list of objects (keys RESULT_KEYS first), with a trailing newline."""
    return json.dumps(to_records(results, per_job=per_job), indent=2) + "\n"


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


_LONG = ("park cap s", "free share", "vs oracle", "p50 start s", "p95 start s", "GCP GPU-h", "rung changes")
_SHORT = ("cap s", "free", "vs orc", "p50 s", "p95 s", "GCP GPU-h", "rungs")
_LEGEND = (
    "cap s: park cap in seconds · free: free share · vs orc: free share over the oracle's · p50 s, p95 s: seconds "
    "to start · rungs: rung changes"
)


def format_table(results: Sequence[RunResult], *, width: int | None = None) -> str:
    """A plain-text table, one row per result; ``vs oracle`` is the free share over the oracle's. With more free
    clusters than fellows, a column per cluster, then GCP, counts my jobs started there. Wider than ``width`` (a
    terminal's columns), the headers are short and a legend under the table spells them out."""
    wide = _format(results, short=False)
    if width is None or max(len(line) for line in wide.splitlines()) <= width:
        return wide
    return _format(results, short=True) + "\n".join(textwrap.wrap(_LEGEND, width)) + "\n"


def _format(results: Sequence[RunResult], *, short: bool) -> str:
    lanes = max((r.clusters for r in results), key=len, default=())
    split = len(lanes) > 1
    on = "" if short else "on "
    header = (
        "strategy",
        *(_SHORT if short else _LONG),
        *((f"{on}{lane}" for lane in lanes) if split else ()),
        *((f"{on}GCP",) if split else ()),
    )
    rows = [header]
    for r in results:
        rows.append(
            (
                r.strategy,
                _cell(r.park_cap_seconds, "g"),
                _cell(r.free_share, ".1%"),
                _cell(oracle_ratio(r, results), ".2f"),
                _cell(r.p50_start_seconds, ".0f"),
                _cell(r.p95_start_seconds, ".0f"),
                _cell(r.gcp_gpu_hours, ".1f"),
                str(r.rung_changes),
                *((str(r.starts.get(lane, 0)) for lane in (*lanes, GCP)) if split else ()),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"
