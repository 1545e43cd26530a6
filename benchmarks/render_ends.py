"""The docs/benchmarks.md rows and section of issue 38's two measured targets (every job followed to its end), from
benchmarks/results/ends_fake.json and ends_real.json (benchmarks/ends.py), appended by benchmarks/render.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADING = "## Every job followed to its end (issue 38): calls per poll, and the end recorded\n"


def targets(fake: dict[str, Any] | None, real: dict[str, Any] | None) -> list[str]:
    """The rows of the Targets table."""
    rows = []
    if fake is not None:
        squeue = max(run["max_squeue_per_poll"] for run in fake["runs"])
        sacct = max(run["max_sacct_per_poll"] for run in fake["runs"])
        once = all(run["end_steps"] == run["ends_recorded"] for run in fake["runs"])
        met = "yes" if squeue <= 1 and sacct <= 1 and once else "NO"
        rows.append(
            f"| 1,000 running dispatches (fake port): at most one squeue and one sacct per poll interval, each end "
            f"recorded once | max {squeue} squeue, {sacct} sacct per poll | {met} |"
        )
    else:
        rows.append("| 1,000 running dispatches: one squeue, at most one sacct per poll | not run | - |")
    if real is not None:
        lag = real["slurm_end_to_journal_seconds"]
        bound = max(real["poll_interval_seconds"], real["follow_interval_seconds"])
        met = "yes" if lag["p95"] <= bound + 1 else "NO"
        rows.append(
            f"| the end recorded within one follow interval ({bound:g} s; sacct's End has whole seconds: + 1 s) of "
            f"SLURM's end, {real['jobs']} jobs | p50 {lag['p50']} s, p95 {lag['p95']} s, max {lag['max']} s | {met} |"
        )
    else:
        rows.append("| the end recorded within one follow interval | not run | - |")
    return rows


def section(
    fake: dict[str, Any] | None, real: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str]
) -> list[str]:
    """The section's lines."""
    lines = [HEADING, "### Calls per poll with 1,000 running dispatches (benchmarks/ends.py --fake)\n"]
    if fake is None:
        lines.append("Not run: `.venv/bin/python -m benchmarks.ends --fake`.\n")
    else:
        lines.append(
            "1,000 one-GPU dispatches running on the fake port (frozen time, 10 s polls); before each of 30 polls "
            "about 3% of the jobs end (COMPLETED, FAILED or TIMEOUT). squeue is the port's observe call; sacct the "
            "one batched read of the jobs squeue shows ended or no longer shows.\n"
        )
        lines += ["| follow interval | max squeue per poll | max sacct per poll | jobs ended | ends recorded |"]
        lines += ["|---|---|---|---|---|"]
        for run in fake["runs"]:
            lines.append(
                f"| {run['follow_interval_seconds']:g} s | {run['max_squeue_per_poll']} | "
                f"{run['max_sacct_per_poll']} | {run['jobs_ended']} | {run['ends_recorded']} (each once) |"
            )
        lines.append(
            "\nWith a 30 s follow interval the running jobs are looked at every third poll (no call in between); "
            "the ends of the last polls are recorded at the next follow.\n"
        )
        lines.append(f"- {provenance(fake)}")
    lines.append("### SLURM's end to the journal, on the real SLURM (benchmarks/ends.py)\n")
    if real is None:
        lines.append("Not run: `.venv/bin/python -m benchmarks.ends` in a cluster of its own.\n")
    else:
        lag = real["slurm_end_to_journal_seconds"]
        lines.append(
            f"{real['jobs']} one-GPU jobs sleeping 3 to 12 s, driven by a Router polling every "
            f"{real['poll_interval_seconds']:g} s and following every {real['follow_interval_seconds']:g} s; for each, "
            "its end step's time in the journal less SLURM's end (sacct's End, whole seconds). "
            f"p50 {lag['p50']} s, p95 {lag['p95']} s, max {lag['max']} s (n={lag['n']}); results: "
            f"{', '.join(real['results'])}.\n"
        )
        lines.append(f"- {provenance(real)}")
    return lines
