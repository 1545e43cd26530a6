"""The docs/benchmarks.md section of benchmarks/calibrated_rungs.py (issue 28), appended by benchmarks/render.py."""

from __future__ import annotations

from typing import Any

from fellows_fsm.sim.real_workload import GRAHAM_2021, REAL_LOAD


def _cell(x: dict[str, Any]) -> str:
    return (
        f"{x['free_share']:.3f} | {x['free_share_vs_oracle']} | {x['p50_start_seconds']} s | "
        f"{x['p95_start_seconds']} s | {x['gcp_gpu_hours']}"
    )


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**NOT met**"


def target_one(w: dict[str, Any]) -> tuple[bool, str]:
    """Target 1 on one workload at 600 s: (held, the sentence with its numbers)."""
    at = {x["policy"]: x for x in w["rows"] if x["park_cap_seconds"] == 600.0}
    own, cal = at["own-cap"], at["calibrated"]
    half = cal["p50_start_seconds"] <= own["p50_start_seconds"] / 2
    gcp = cal["gcp_gpu_hours"] <= own["gcp_gpu_hours"]
    share = cal["free_share"] >= own["free_share"]
    trivially = " (trivially: both 0 s)" if own["p50_start_seconds"] == 0 else ""
    text = (
        f"`{w['workload']}` seed {w['seed']}: median {cal['p50_start_seconds']} s against own-cap's "
        f"{own['p50_start_seconds']} s {_verdict(half)}{trivially}; GCP GPU-hours {cal['gcp_gpu_hours']} against "
        f"{own['gcp_gpu_hours']} {_verdict(gcp)}; free share {cal['free_share']:.4f} against "
        f"{own['free_share']:.4f} {_verdict(share)}"
    )
    return half and gcp and share, text


def data_notes() -> list[str]:
    """The derived table, and what the snapshot bias does to each of its figures."""
    g = GRAHAM_2021
    run, over = g["run_seconds"], g["limit_over_run"]
    assert isinstance(run, tuple)
    assert isinstance(over, tuple)
    mix = ", ".join(f"{n} GPU {100 * w:.1f} %" for n, w in g["gpus"])  # type: ignore[attr-defined]
    limits = ", ".join(f"{v / 3600:g} h" for v, _ in g["round_limits"])  # type: ignore[attr-defined]
    return [
        "The numbers `real-graham` draws from (`GRAHAM_2021`, from `python -m benchmarks.real_data derive --cluster "
        "graham` on `../shared/data/slurm-gpu-jobs-cedar-graham-2021.csv.gz`: the 11,105 Graham GPU jobs of "
        "May-June 2021 that ran at least a minute; source mila-iqia/slurm-queue-time-pred, MIT licence; the data "
        f"are not in the project): GPUs per job {mix}; run time median {run[10] / 3600:.1f} h (5 % {run[1]:g} s, "
        f"95 % {run[19] / 3600:.1f} h); time limit over run time median {over[10]:g} (5 % {over[1]:g}, 95 % "
        f"{over[19]:g}); {100 * g['limits_at_round_values']:.1f} % of limits at one of {len(g['round_limits'])} "  # type: ignore[arg-type]
        f"values ({limits}); {g['arrivals_per_hour']} arrivals per hour in the snapshots. Others' load is offered "
        f"at {REAL_LOAD:g} of the GPUs (the load check below says why).\n",
        "What the snapshot bias does to each figure (each source file is a noon snapshot of the jobs not yet "
        "finished): *GPUs per job*: jobs that waited are over-represented, and bigger jobs wait longer, so the "
        "multi-GPU share errs high. *Run time*: a job running at noon is more likely a long one (length bias), so "
        "run times err long. *Limit over run time*: jobs that ended far below their limits between two noons are "
        "missing, so the ratio errs low (limits look closer to run times than they were), which makes the "
        "simulated history err towards jobs that run their limits. *Round limits*: the values are the users' own, "
        "their shares lean to the long limits of jobs that waited. *Arrivals per hour*: an undercount (jobs "
        "submitted and finished between two snapshots are missing), and the hour-of-day profile is the cut itself "
        "(nothing submitted after noon appears): the workload uses flat Poisson arrivals at the offered load "
        "instead. *Eligible wait*: leans to long waits (a job that waited is more likely to be seen).\n",
    ]


def load_lines(r: dict[str, Any]) -> list[str]:
    """The load check: own-cap's median time to start on real-graham at each offered load, every seed."""
    rows = r.get("load_check") or []
    if not rows:
        return []
    seeds = sorted({x["seed"] for x in rows})
    lines = [
        "The load check (own-cap at 600 s on `real-graham`, p50 start / GCP GPU-h, every seed): Graham's GPU jobs "
        "waited a median of 7.9 h once eligible (issue 28's week), so most of the real cluster's jobs wait; a load "
        "at which my median job starts at once leaves the ladder nothing to decide. "
        f"`real-graham` is offered at {REAL_LOAD:g}: the lowest load here at which own-cap's median is above 0 s "
        "on every seed.\n",
        "| load | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|" + "---|" * len(seeds),
    ]
    for load in sorted({x["load"] for x in rows}):
        at = {x["seed"]: x for x in rows if x["load"] == load}
        lines.append(
            f"| {load:g} | "
            + " | ".join(f"{at[s]['p50_start_seconds']} s / {at[s]['gcp_gpu_hours']}" for s in seeds)
            + " |"
        )
    lines.append("")
    return lines


def section(r: dict[str, Any] | None, provenance: str) -> list[str]:
    """The section's lines (``provenance``: the command and run line, as render.py writes them)."""
    lines = [
        "## calibrated on every rung, on the synthetic workload and on one drawn from real SLURM data (simulator)\n"
    ]
    if r is None:
        return [*lines, "Not run.\n"]
    lines.append(provenance.replace("Command: `.venv", "Command: `nice -n 5 .venv"))
    lines.append(
        f"Every policy is the real Router on the simulated cluster ({r['gpus']} GPUs, poll "
        f"{r['poll_interval_seconds']:g} s, {r['hours']:g} h of submissions): `off` the plain ladder, `own-cap` "
        "the default, `estimate` SLURM's start estimate, `calibrated-last` issue 21's policy (the last rung left on "
        f"the history, below {r['threshold']:g}), `calibrated` issue 28's (an earlier rung left when the history "
        f"gives the job less than {r.get('earlier_threshold', r['threshold']):g} chance of a start on it before the "
        f"ladder's end, the last rung when less than {r.get('last_threshold', r['threshold']):g} within its window; "
        "own-cap underneath; with fewer than "
        f"{r['min_history']} finished jobs or jobs in the way hidden, the rung is waited out), `calibrated, first "
        "cut` calibrated as first built (0.05 within each rung's own window, every rung), and the oracle "
        "(earliest start within the ladder's worst case, else GCP at once). Two workloads: `synthetic` is the "
        "built-in one with `realistic_time_limits`; `real-graham` draws every job's GPUs, run time and time limit "
        "from Graham's 2021 GPU jobs (`fellows_fsm/sim/real_workload.py`, derived by `python -m benchmarks.real_data "
        "derive` from mila-iqia/slurm-queue-time-pred, MIT licence), in the synthetic workload's shape (others' "
        f"Poisson arrivals offered at {r['real_load']:g} of the GPUs, my bursts of 3-6 jobs every 3 h). The first "
        f"seed plays caps {', '.join(f'{c:g}' for c in r['park_caps'])} s, the other seeds 600 s. The sweep took "
        f"{r['sweep_seconds']} s.\n"
    )
    lines += data_notes()
    lines += load_lines(r)
    for w in r["workloads"]:
        if w["seed"] != r["seeds"][0]:
            continue
        lines.append(
            f"`{w['workload']}`, seed {w['seed']}: {w['jobs']} jobs, {w['my_jobs']} of them mine "
            f"({w['my_gpu_hours']} GPU-hours), limits {w['requested_over_used']}x the time used.\n"
        )
        lines.append("| cap | policy | free share | vs oracle | p50 start | p95 start | GCP GPU-h |")
        lines.append("|---|---|---|---|---|---|---|")
        lines += [f"| {x['park_cap_seconds']:g} s | {x['policy']} | {_cell(x)} |" for x in w["rows"]]
        lines.append("")
    names = ["off", "own-cap", "estimate", "calibrated-last", "calibrated, first cut", "calibrated"]
    lines.append("Every seed at 600 s (free share / p50 start / GCP GPU-h):\n")
    lines.append("| workload | seed | " + " | ".join(names) + " | oracle |")
    lines.append("|---|---|" + "---|" * (len(names) + 1))
    for w in r["workloads"]:
        rows = {x["policy"]: x for x in w["rows"] if x["park_cap_seconds"] == 600.0}
        cells = [
            f"{rows[n]['free_share']:.3f} / {rows[n]['p50_start_seconds']} s / {rows[n]['gcp_gpu_hours']}"
            for n in [*names, "oracle"]
        ]
        lines.append(f"| {w['workload']} | {w['seed']} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "The targets' own traces (300 s caps, my one 8-GPU job; benchmarks/calibrated_rungs.py: `scenarios`):\n"
    )
    lines.append("| case | policy | lane | QoS | time to start |")
    lines.append("|---|---|---|---|---|")
    for c in r["scenarios"]:
        lines.append(f"| {c['case']} | {c['policy']} | {c['lane']} | {c['qos'] or '-'} | {c['start_seconds']} s |")
    lines.append("")
    ones = [target_one(w) for w in r["workloads"]]
    held = {c["policy"]: c for c in r["scenarios"] if c["case"].startswith("node held")}
    ending = {c["policy"]: c for c in r["scenarios"] if c["case"].startswith("blockers")}
    polls = r["poll_interval_seconds"]
    two = held["calibrated"]["lane"] == "gcp" and held["calibrated"]["start_seconds"] <= 3 * polls
    three = ending["calibrated"]["lane"] == "fellows" and ending["calibrated"]["qos"] == "high-eur"
    lines.append(
        "Targets (issue 28), calibrated on every rung: (1) at 600 s, median time to start at most half of "
        "own-cap's, with no more GCP GPU-hours and no less free share: "
        + "; ".join(text for _, text in ones)
        + f" (held on {sum(ok for ok, _ in ones)} of {len(ones)} workload-seeds)"
        + f". (2) A node held for hours, the caps free, the paid lane within three polls ({3 * polls:g} s) of the "
        f"submit: {held['calibrated']['start_seconds']} s in the simulator (the plain ladder "
        f"{held['off']['start_seconds']} s) {_verdict(two)} (the simulated port proves a cancelled pending job gone "
        "in the tick of its cancel, as the SLURM port does, so each rung change takes one poll; on the real SLURM "
        "the same walk is tests/integration/test_calibrated_rungs_real.py, the node-held test). (3) Blockers that "
        "end within the window, others "
        f"waiting below: the job starts on its rung ({ending['calibrated']['lane']}, "
        f"{ending['calibrated']['qos']}) {_verdict(three)}. The default `park_early` becomes `calibrated` only if "
        f"all three hold: {'they do' if all(ok for ok, _ in ones) and two and three else 'it stays own-cap'}.\n"
    )
    return lines
