"""Benchmark c at 10,000 live after issue 26 (several SLURM clusters as lanes): the one-cluster controller against
main before the issue, in one run, rendered into docs/benchmarks.md by benchmarks/render.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import render_issue25

VS_BEFORE = "controller_cost_issue26_vs_ffb2f59"
"""``benchmarks.controller_cost --sizes 10000 --repeats 2 --baseline ffb2f59`` (main before issue 26), renamed."""
INTRO = (
    "Issue 26 put every SLURM call of the driver behind `driver/clusters.py`: `Clusters` (with one cluster it hands "
    "each call straight to the port) and gave each rung its lane. With one cluster the tick must cost what it did. "
    "One run, old = main before the issue, new = every branch of it merged; two fresh processes a side (this "
    "shared machine was loaded by other test runs, so the ranges, not one median, are the comparison):\n"
)


def section(r: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str], nice: str) -> list[str]:
    """The heading, what was compared, and the kept run (its table, rate and memory), or "Not run."."""
    lines = ["#### After issue 26: one cluster, against main before it\n", INTRO]
    if r is None:
        return [*lines, "Not run.\n"]
    heading = f"The command below, old = main before issue 26 (`{r['baseline'][:7]}`), new = issue 26 merged"
    return [*lines, *render_issue25.kept_run(r, heading, VS_BEFORE, provenance, nice)]
