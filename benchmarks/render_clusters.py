"""The docs/benchmarks.md section of benchmarks/clusters.py (issue 26: two real clusters, one over ssh), appended by
benchmarks/render.py from benchmarks/results/clusters*.json."""

from __future__ import annotations

import json
from typing import Any

HEADING = "## Two real SLURM clusters, one over ssh (issue 26; run in its own network namespace, scripts/in-netns)\n"
RESULTS = ("clusters", "clusters_slurm24.11")
"""The 22.05 run (the host's SLURM) and the 24.11 one (Debian 13's, in its root), when it ran."""
COMMAND = (
    "scripts/in-netns bench26 bash -c 'scripts/dev-slurm up >/dev/null && FELLOWS_SLURM_PROFILE=inst scripts/dev-slurm "
    'up >/dev/null && FELLOWS_SLURM_PROFILE=inst scripts/dev-sshd up >/dev/null && eval "$(scripts/dev-slurm env)" '
    "&& nice -n 10 .venv/bin/python -m benchmarks.clusters'"
)
COMMAND_24 = (
    "scripts/dev-slurm --slurm 24.11 venv && scripts/in-netns real-24 bash -c 'scripts/dev-slurm --slurm 24.11 up "
    '>/dev/null && scripts/dev-slurm --slurm 24.11 exec bash -c "FELLOWS_SLURM_PROFILE=inst scripts/dev-slurm up '
    ">/dev/null && FELLOWS_SLURM_PROFILE=inst scripts/dev-sshd up >/dev/null && nice -n 10 .venv-24.11/bin/python -m "
    "benchmarks.clusters\"; scripts/dev-slurm --slurm 24.11 down'"
)


def _ms(v: dict[str, Any]) -> str:
    """min / median / max of seconds, in ms."""
    return " / ".join(f"{v[k] * 1000:.1f} ms" for k in ("min", "median", "max"))


def _pct(v: dict[str, Any]) -> str:
    return f"{v['p50']} s / {v['p95']} s / {v['max']} s (n={v['n']})"


def _met(ok: bool) -> str:
    return "yes" if ok else "NOT met"


def _version(r: dict[str, Any]) -> str:
    return f"SLURM {r.get('slurm', '22.05')}"


def section(results: list[dict[str, Any]]) -> list[str]:
    """The section's lines: targets, the poll table, the cluster-change table, and how each was run."""
    lines = [HEADING]
    if not results:
        return [*lines, "Not run yet: `" + COMMAND + "`.\n"]
    lines.append(
        "The real Router and SLURM ports on two real clusters at once (tests/integration/two_clusters.py's setup): "
        "`fellows` here (its commands on PATH) and `inst` (partition h200, account inst-acct, QoS inst-high and "
        "inst-low with an 8-GPU per-user cap each, typed GRES gpu:h200) reached only over its own sshd on loopback "
        '(`[lanes.inst] kind = "slurm"`, `host = "inst-cluster"`, `ssh_options = ["-F", ...]`: one ssh master '
        "per host). Every rung of fellows is full (this user's high-eur and normal-eur caps taken, the node's 64 "
        "GPUs busy), so a dispatch that walks leaves fellows for inst.\n"
    )
    lines += ["| target | " + " | ".join(_version(r) for r in results) + " |", "|---|" + "---|" * len(results)]
    cells = []
    for r in results:
        p = r["poll"]
        extra = p["two_minus_slower_round_trip_seconds"]
        ok = extra["max"] <= p["target_extra_seconds"]
        cells.append(
            f"median {extra['median'] * 1000:.1f} ms, p95 {p['two_minus_slower_round_trip_p95_seconds'] * 1000:.1f} "
            f"ms, max {extra['max'] * 1000:.1f} ms: {_met(ok)}"
        )
    lines.append(
        f"| a poll with two clusters <= the slower cluster's round trip + "
        f"{results[0]['poll']['target_extra_seconds'] * 1000:g} ms (each poll's wall time minus the slower of the "
        "two clusters' squeue inside that same poll) | " + " | ".join(cells) + " |"
    )
    lines.append(
        "| (shown beside it: the median poll minus the slower median round trip measured alone, same run) | "
        + " | ".join(f"{r['poll']['median_two_minus_median_slower_alone_seconds'] * 1000:.1f} ms" for r in results)
        + " |"
    )
    cells = []
    for r in results:
        c = r["change"]
        worst = c["last_fellows_deadline_to_inst_job_queued_seconds"]["max"]
        cells.append(f"max {worst} s: {_met(worst <= c['target_seconds'])}")
    lines.append(
        f"| the decision across a cluster change <= poll + 0.5 s = {results[0]['change']['target_seconds']:g} s "
        "(last fellows rung's deadline -> the inst job's id journaled) | " + " | ".join(cells) + " |"
    )
    lines.append("")
    lines.append(
        f"**The poll.** {results[0]['poll']['live_per_cluster']} live dispatches on each cluster for the two-cluster "
        "router (on fellows: pinned to high-eur; on inst: walked there, pending on inst-high), and the same number "
        "on fellows for a one-cluster router (its own journal) in the same run. Each of "
        f"{results[0]['poll']['polls']} rounds times, one after another: the two-cluster `Router.poll`, the "
        "one-cluster `Router.poll`, one observe through inst's port alone (one squeue over the ssh master), one "
        "through fellows' port alone (one squeue here); and, inside the two-cluster poll, how long each cluster's "
        "squeue took (the port's own command timer). min / median / max:\n"
    )
    lines += ["| figure | " + " | ".join(_version(r) for r in results) + " |", "|---|" + "---|" * len(results)]
    rows = (
        ("two-cluster poll", "two_cluster_poll_seconds"),
        ("one-cluster poll (same run)", "one_cluster_poll_seconds"),
        ("inst round trip alone (squeue over ssh)", "inst_round_trip_seconds"),
        ("fellows round trip alone (squeue here)", "fellows_round_trip_seconds"),
        ("two-cluster poll minus the slower squeue inside it", "two_minus_slower_round_trip_seconds"),
        (
            "two-cluster poll minus the slower round trip alone (measured right after it)",
            "two_minus_slower_round_trip_alone_seconds",
        ),
    )
    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(_ms(r["poll"][key]) for r in results) + " |")
    for lane, label in (
        ("inst", "inst's squeue inside the two-cluster poll"),
        ("fellows", "fellows' squeue inside it"),
    ):
        lines.append(
            f"| {label} | " + " | ".join(_ms(r["poll"]["in_poll_squeue_seconds"][lane]) for r in results) + " |"
        )
    lines.append(
        "| squeue per poll, fellows / inst | "
        + " | ".join(
            f"{q['fellows']['max']:g} / {q['inst']['max']:g} (max)"
            for q in (r["poll"]["squeue_per_poll"] for r in results)
        )
        + " |"
    )
    lines.append("")
    lines.append(
        "The two clusters are read side by side (driver/clusters.py: one thread per cluster), so the two-cluster poll "
        "is the slower round trip (inst's, through ssh) plus the router's own work on twice the dispatches, not the "
        "sum of the two round trips.\n"
    )
    c0 = results[0]["change"]["runs"][0]
    lines.append(
        f"**The cluster change.** {c0['dispatches']} dispatches {c0['stagger_seconds']:g} s apart, "
        f"{len(results[0]['change']['runs'])} runs pooled, park caps of {c0['fellows_cap_seconds']:g} s on every "
        f'fellows rung and `park_early = "off"`, poll interval {c0["poll_interval_seconds"]:g} s (the router\'s own '
        "loop, `Router.run`); inst-high has room for the first (the rest pend on its per-user cap: the figure is to "
        "the job queued, not to its start). From the journal: the low-eur window's deadline (windows chained as the "
        "lifecycle computes them) and the step that parked low-eur, each against the time the inst job's id was "
        "journaled (sbatch answered over ssh). p50 / p95 / max (n):\n"
    )
    lines += ["| figure | " + " | ".join(_version(r) for r in results) + " |", "|---|" + "---|" * len(results)]
    lines.append(
        "| last fellows deadline -> inst job queued | "
        + " | ".join(_pct(r["change"]["last_fellows_deadline_to_inst_job_queued_seconds"]) for r in results)
        + " |"
    )
    lines.append(
        "| the tick that parked low-eur -> inst job queued | "
        + " | ".join(
            " ; ".join(_pct(run["park_tick_to_inst_job_queued_seconds"]) for run in r["change"]["runs"])
            for r in results
        )
        + " (per run) |"
    )
    lines.append(
        "| mean seconds per inst command (first run) | "
        + " | ".join(f"`{json.dumps(r['change']['runs'][0]['command_seconds_mean'].get('inst', {}))}`" for r in results)
        + " |"
    )
    lines.append("")
    lines.append(
        "A window that closes between two polls is parked at the next poll, which cancels the low-eur job and, the "
        "cancel proved, submits on inst in the same poll: the deadline -> queued figure is up to one poll interval "
        "(where the deadline falls in the cadence) plus that poll's commands, the sbatch over ssh among them; the "
        "park -> queued figure is that poll's own work after the park.\n"
    )
    for r in results:
        m = r["machine"]
        command = COMMAND_24 if str(r.get("slurm", "22.05")).startswith("24.") else COMMAND
        lines.append(
            f"- {_version(r)}: Command: `{command}`  \n  Run: {r['date']} on nproc={m['nproc']}, {m['uname_m']}, "
            f"Python {m['python']}, kernel {m['kernel']}. The machine has 2 shared cores and other sessions ran on "
            "it at the same time: the figures are noisy, and the benchmark ran under `nice -n 10`."
        )
    return lines
