"""Workloads drawn from public SLURM data: the GPU jobs of mila-iqia/slurm-queue-time-pred (MIT licence), two
production clusters of the Digital Research Alliance of Canada, May-July 2021.

    .venv/bin/python -m benchmarks.real_data derive [--data PATH] [--cluster graham]
    .venv/bin/python -m benchmarks.real_data trace  [--data PATH] [--cluster graham] [--start 2021-06-20] [--days 7]
                                                    [--me ACCOUNT] [--sample 0.1] [--seed 1] -o TRACE.jsonl

``derive`` prints the distributions the ``real-graham`` workload draws from (fellows_fsm/sim/real_workload.py keeps
them as the numbers they are; paste the printed table there to refresh it): GPUs per job, run time, time limit over
run time, the round values limits take, arrivals per hour of the day. ``trace`` writes a trace of the real jobs for
``fellows-fsm simulate --trace`` at run time (never committed): the jobs submitted in the window, one account's
as mine, a seeded sample of the others' (the simulated cluster is far smaller than the real one).

The data file is read where it is (default ``../shared/data/...``, relative to the repository); nothing from it is
copied into the project but the summary numbers. Jobs that ran under a minute are left out of the distributions:
one account's hundreds of 1-3 s jobs would otherwise be a third of the sample, and they make no queueing decision.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import random
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from statistics import quantiles

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPOSITORY / ".." / "shared" / "data" / "slurm-gpu-jobs-cedar-graham-2021.csv.gz"
"""``../shared/data/...`` relative to the repository (a clone beside the shared folder)."""
MIN_RUN_SECONDS = 60.0
QUANTILES = 20
"""The run time and limit/run distributions are kept as 19 inner quantiles (every 5 %) plus min and max."""


def rows(path: Path, cluster: str) -> Iterator[dict[str, str]]:
    """Every row of ``cluster`` in the data file."""
    with gzip.open(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            if row["cluster"] == cluster:
                yield row


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")  # the source's local times, kept as such


def derive(path: Path, cluster: str) -> dict[str, object]:
    """The distributions of ``cluster``'s GPU jobs that ran at least MIN_RUN_SECONDS."""
    jobs = [r for r in rows(path, cluster) if float(r["run_time_sec"]) >= MIN_RUN_SECONDS and int(r["gpus"]) > 0]
    run = sorted(float(r["run_time_sec"]) for r in jobs)
    over = sorted(float(r["time_limit_sec"]) / float(r["run_time_sec"]) for r in jobs)
    gpus = collections.Counter(int(r["gpus"]) for r in jobs)
    limits = collections.Counter(round(float(r["time_limit_sec"])) for r in jobs)
    common = [(limit, count) for limit, count in limits.most_common() if count / len(jobs) >= 0.01]
    submits = [_when(r["submit_time"]) for r in jobs]
    days = {s.date() for s in submits}
    hours = collections.Counter(s.hour for s in submits)
    return {
        "source": f"mila-iqia/slurm-queue-time-pred (MIT), {cluster}, GPU jobs that ran >= {MIN_RUN_SECONDS:.0f} s",
        "jobs": len(jobs),
        "accounts": len({r["account_id"] for r in jobs}),
        "days": len(days),
        "gpus": sorted((g, round(c / len(jobs), 4)) for g, c in gpus.items() if c / len(jobs) >= 0.001),
        "run_seconds": [run[0], *(round(q) for q in quantiles(run, n=QUANTILES)), run[-1]],
        "limit_over_run": [round(over[0], 3), *(round(q, 3) for q in quantiles(over, n=QUANTILES)), round(over[-1], 1)],
        "round_limits": [(limit, round(count / len(jobs), 3)) for limit, count in sorted(common)],
        "limits_at_round_values": round(sum(c for _, c in common) / len(jobs), 3),
        "arrivals_per_hour": round(len(jobs) / (24 * len(days)), 2),
        "hour_of_day_share": [round(hours[h] / len(jobs), 4) for h in range(24)],
        "median_run_over_limit": round(sorted(1 / x for x in over)[len(over) // 2], 3),
        "median_eligible_wait_seconds": sorted(float(r["eligible_wait_sec"]) for r in jobs)[len(jobs) // 2],
    }


def trace(
    path: Path, cluster: str, start: str, days: float, me: str | None, sample: float, seed: int
) -> list[dict[str, object]]:
    """The real jobs submitted in [start, start + days), as trace lines: one account's as mine (``me``, else the
    account with the most GPU-hours among those whose jobs ran >= MIN_RUN_SECONDS), a seeded ``sample`` of the
    others' as background load."""
    t0 = _when(f"{start} 00:00:00")
    t1 = t0 + timedelta(days=days)
    window = [r for r in rows(path, cluster) if t0 <= _when(r["submit_time"]) < t1 and int(r["gpus"]) > 0]
    window = [r for r in window if float(r["run_time_sec"]) >= MIN_RUN_SECONDS]
    if me is None:
        hours = collections.Counter[str]()
        for r in window:
            hours[r["account_id"]] += int(r["gpus"]) * float(r["run_time_sec"])
        me = hours.most_common(1)[0][0]
    rng = random.Random(seed)  # a reproducible sample, not a secret
    out = []
    for r in sorted(window, key=lambda r: r["submit_time"]):
        mine = r["account_id"] == me
        if not mine and rng.random() >= sample:
            continue
        duration = float(r["run_time_sec"])
        line: dict[str, object] = {
            "submit_at": (_when(r["submit_time"]) - t0).total_seconds(),
            "gpus": int(r["gpus"]),
            "duration": duration,
            "user": "me" if mine else f"acct{r['account_id']}",
            "time_limit": max(duration, float(r["time_limit_sec"])),
        }
        if not mine:
            line["qos"] = "low-eur" if float(r["time_limit_sec"]) > 7 * 86_400 else "normal-eur"
        out.append(line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("derive", "trace"))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data file (read in place)")
    parser.add_argument("--cluster", default="graham", choices=("graham", "cedar"))
    parser.add_argument("--start", default="2021-06-20", help="trace: the first day (the source's local time)")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--me", default=None, help="trace: the account whose jobs are mine")
    parser.add_argument("--sample", type=float, default=0.1, help="trace: share of the others' jobs kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args()
    if not args.data.exists():
        sys.exit(f"data file {args.data} not found; pass --data PATH (the shared slurm-gpu-jobs CSV)")
    if args.what == "derive":
        text = json.dumps(derive(args.data, args.cluster), indent=1)
    else:
        lines = trace(args.data, args.cluster, args.start, args.days, args.me, args.sample, args.seed)
        text = "".join(json.dumps(line) + "\n" for line in lines)
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
