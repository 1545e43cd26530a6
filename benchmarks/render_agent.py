"""The docs/benchmarks.md subsection of issue 40's burst faults at the issue's sizes (benchmarks/agent_faults.py,
benchmarks/results/agent_faults.json), appended after the agent loop's section by benchmarks/render.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RESULT = "agent_faults"
ROWS = (
    ("dispatches printed (distinct)", lambda r: f"{r['printed_ids']:,} ({r['distinct_printed_ids']:,})"),
    ("printed but not journaled", lambda r: f"{r['printed_not_journaled']}"),
    ("journaled, each with its job id", lambda r: f"{r['journaled_dispatches']:,}, {r['journaled_with_job']:,}"),
    ("jobs in squeue carrying a dispatch's token", lambda r: f"{r['jobs_in_squeue_with_a_token']:,}"),
    (
        "dispatches with more than one job (journal; squeue)",
        lambda r: (
            f"{r['dispatches_with_more_than_one_journaled_job']}; {r['dispatches_with_more_than_one_job_in_squeue']}"
        ),
    ),
    ("parks (a rung left)", lambda r: f"{r['parks']}"),
    ("handed to the paid lane", lambda r: f"{r['handed_to_the_paid_lane']}"),
)


def _ok(r: dict[str, Any], total: int) -> bool:
    return (
        r["distinct_printed_ids"] == r["printed_ids"] == r["journaled_dispatches"] == r["journaled_with_job"] == total
        and r["printed_not_journaled"] == 0
        and r["jobs_in_squeue_with_a_token"] == total
        and r["dispatches_with_more_than_one_journaled_job"] == r["dispatches_with_more_than_one_job_in_squeue"] == 0
        and r["parks"] == r["handed_to_the_paid_lane"] == 0
    )


def section(r: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    """The subsection's lines."""
    lines = ["### The burst faults at the issue's sizes (benchmarks/agent_faults.py)\n"]
    if r is None:
        return [*lines, "Not run.\n"]
    out, kill = r["outage"], r["killed"]
    total_out, total_kill = out["shells"] * out["scripts_each"], kill["scripts"]
    lines += [
        provenance(r),
        f"**Outage**: {out['shells']} shells at once, each `fellows-fsm submit` of {out['scripts_each']} scripts, "
        f"slurmctld stopped (SIGSTOP) for {out['outage_seconds']:g} s from just before the first command started. "
        f"**Killed**: one `submit` of {kill['scripts']} scripts at {kill['max_submits_per_second']:g} sbatch a second, "
        f"its background driver SIGKILLed when {kill['submitted_when_killed']} had their first submit journaled. "
        "Windows of an hour and a paid command lane after the ladder, so a park or a handoff could only be the "
        "fault's.\n",
        "| check | outage | killed |",
        "|---|---|---|",
        *(f"| {name} | {cell(out)} | {cell(kill)} |" for name, cell in ROWS),
        f"| command exit statuses | {'all 0' if not out['failed_commands'] else out['failed_commands']} "
        f"| {kill['exit_status']} (a new driver: {'yes' if kill['a_new_driver'] else 'no'}) |",
        f"| wall, first start to the last command's exit | {out['wall_seconds_first_start_to_last_queued']} s "
        f"| {kill['wall_seconds']} s |",
        f"| the driver's squeue calls; the least time between two (poll interval {r['poll_interval_seconds']:g} s) "
        f"| {out['squeue_rate']['squeue']}; {out.get('least_seconds_between_squeue_calls')} s | - |",
        "",
    ]
    verdict = _ok(out, total_out) and _ok(kill, total_kill) and kill["exit_status"] == 0 and not out["failed_commands"]
    lines.append(
        ("Both held: " if verdict else "NOT held: ")
        + "every printed dispatch journaled once with one job, no job twice, no park and nothing paid for the "
        "fault.\n"
    )
    return lines
