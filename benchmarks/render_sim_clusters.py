"""The docs/benchmarks.md section of benchmarks/sim_clusters.py (issue 26: a second free cluster in the order),
appended by benchmarks/render.py."""

from __future__ import annotations

from typing import Any

HEADING = "## A second free cluster in the order (simulator, issue 26)"
ONE_RUNG = ("static", "single-timeout")
"""The policies that play one rung per cluster."""


def _cap(value: float | None) -> str:
    return "-" if value is None else f"{value:g} s"


def section(r: dict[str, Any] | None, provenance: str) -> list[str]:
    """The section's lines: what was played, the command, and one row per policy and cap, one cluster beside two."""
    lines = [f"{HEADING}\n"]
    if r is None:
        return [*lines, "Not run.\n"]
    (c,) = r["clusters"]
    tiers = ", ".join(f"{n} {prio} / {'no' if cap is None else cap} GPUs per user" for n, prio, cap in c["tiers"])
    lines.append(
        f"Every policy is the real Router on the built-in synthetic workload (seed {r['seed']}, {r['hours']:g} h, "
        f"{r['jobs']} jobs, {r['my_jobs']} of them mine, {r['my_gpu_hours']} GPU-h; fellows {r['gpus']} GPUs, poll "
        f"{r['poll_interval_seconds']:g} s), played twice: on fellows alone (order fellows, gcp), and with a second "
        f"SLURM lane `{c['name']}` after it (order fellows, {c['name']}, gcp): {c['gpus']} GPUs, others offering "
        f"{c['load']:g} of them (the synthetic background, on its tiers), tiers {tiers}, each a rung in that order. "
        "Every rung of both clusters has the cap; static keeps the first rung of each cluster, single-timeout waits "
        "its cluster's whole ladder there; the oracles probe every rung of both. *on fellows / on inst / on GCP* "
        "count my jobs started there. The one-cluster figures are `fellows-fsm simulate`'s without `--cluster`. "
        f"The sweeps took {r['one']['sweep_seconds']} s and {r['two']['sweep_seconds']} s.\n"
    )
    lines.append(provenance)
    caps = ",".join(format(cap, "g") for cap in sorted({x["park_cap_seconds"] for x in r["two"]["results"]}))
    strategies = ",".join(dict.fromkeys(x["strategy"] for x in r["two"]["results"]))
    lines.append(
        f"The two-cluster rows as the CLI prints them: `fellows-fsm simulate --park-caps {caps} --strategies "
        f"{strategies} {' '.join(r['cluster_options'])}`.\n"
    )
    lines.append(
        "| policy | cap | free share: one / two clusters | p50 start s: one / two | p95 start s: one / two | "
        "GCP GPU-h: one / two | on fellows / on inst / on GCP (two clusters) |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    one = {(x["strategy"], x["park_cap_seconds"]): x for x in r["one"]["results"]}
    for x in r["two"]["results"]:
        o = one[(x["strategy"], x["park_cap_seconds"])]
        starts = " / ".join(str(n) for n in x["starts"].values())
        lines.append(
            f"| {x['strategy']} | {_cap(x['park_cap_seconds'])} | {o['free_share']:.1%} / {x['free_share']:.1%} | "
            f"{o['p50_start_seconds']} / {x['p50_start_seconds']} | {o['p95_start_seconds']} / "
            f"{x['p95_start_seconds']} | {o['gcp_gpu_hours']} / {x['gcp_gpu_hours']} | {starts} |"
        )
    lines.append("")
    fewer = [
        x
        for x in r["two"]["results"]
        if x["gcp_gpu_hours"] < one[x["strategy"], x["park_cap_seconds"]]["gcp_gpu_hours"]
    ]
    slower = [
        x["strategy"]
        for x in r["two"]["results"]
        if (x["p50_start_seconds"] or 0) > (one[x["strategy"], x["park_cap_seconds"]]["p50_start_seconds"] or 0)
    ]
    one_rung = [name for name in slower if name in ONE_RUNG]
    last_rung = [name for name in slower if name not in ONE_RUNG]
    why = []
    if one_rung:
        why.append(f"{', '.join(one_rung)} wait out one more rung (the second cluster's first) before GCP")
    if last_rung:
        why.append(
            f"for {', '.join(last_rung)} the last rung of the one ladder is now the second cluster's last, so fellows' "
            "low-eur is no longer the rung their policy treats as last: a job it left at once for GCP now waits out "
            "low-eur's window, then the second cluster's rungs"
        )
    lines.append(
        f"The second cluster lowers GCP GPU-hours in {len(fewer)} of {len(r['two']['results'])} rows. A job reaches "
        "it only once fellows' whole ladder parked out, so its time to start there is fellows' caps plus its own "
        "wait, and the p95 grows by the second cluster's caps where its rungs are full too. "
        + (f"The median rises where {'; '.join(why)}.\n" if why else "No median rises.\n")
    )
    return lines
