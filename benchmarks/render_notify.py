"""The docs/benchmarks.md section of issue 39 (notifications): step to delivery on loopback
(benchmarks/results/notify_delivery.json, benchmarks/notify_delivery.py), and benchmark a's decision overhead with a
sink that never answers against none (decision_overhead_hanging_sink.json against decision_overhead.json)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADING = "## Notifications (issue 39): step to delivery, and the walk with a sink that never answers\n"


def _pct(v: dict[str, Any], scale: float = 1000.0, unit: str = " ms") -> str:
    digits = 1 if scale > 1 else 3
    return " / ".join(f"{v[k] * scale:.{digits}f}{unit}" for k in ("p50", "p95", "max")) + f" (n={v['n']})"


def _row(label: str, rung: dict[str, Any], start: dict[str, Any]) -> str:
    return f"| {label} | {_pct(rung, 1.0, ' s')} | {_pct(start, 1.0, ' s')} |"


def section(
    delivery: dict[str, Any] | None,
    plain: dict[str, Any] | None,
    hanging: dict[str, Any] | None,
    provenance: Callable[[dict[str, Any]], str],
    real_provenance: Callable[[dict[str, Any]], str] | None = None,
) -> list[str]:
    """The section's lines (``real_provenance``: the provenance of a real-SLURM run, its lock or netns named)."""
    lines = [HEADING]
    if delivery is None:
        lines.append("Step to delivery: not run.\n")
    else:
        lines.append(
            f"Step to delivery on loopback: {delivery['events']} dispatches submitted {delivery['gap_seconds']:g} s "
            "apart on the fake port (each first submit journals its step and its `queued` event in one transaction), "
            "the driver's notifier as the driver runs it (woken after each step, as a tick wakes it), a signed JSON "
            "webhook to an `http.server` receiver on 127.0.0.1. From the step's journaled time to the receiver "
            f"reading the request, p50 / p95 / max: **{_pct(delivery['step_to_delivery_seconds'])}** "
            f"({delivery['delivered']} of {delivery['events']} delivered).\n"
        )
        lines.append(f"- {provenance(delivery)}\n")
    if hanging is None:
        lines.append(
            "Decision overhead (benchmark a) with a sink that never answers: not run yet "
            "(`.venv/bin/python -m benchmarks.decision_overhead --hanging-sink` on the real SLURM, then the render).\n"
        )
        return lines
    key = "rung_deadline_to_next_job_queued_seconds"
    started = "last_deadline_to_gcp_handoff_started_seconds"
    base = hanging.get("baseline_no_sink_" + key)
    base_started = hanging.get("baseline_no_sink_" + started)
    lines.append(
        f"Decision overhead (benchmark a, {hanging['repeats']} runs of {hanging['dispatches']} dispatches 0.5 s apart, "
        "caps of {:g} s, poll {:g} s) with every event sent to a loopback receiver that reads the request and never "
        "answers (the sink's timeout 30 s), against no sink in runs alternating with them (the same load); p50 / "
        "p95 / max:\n".format(hanging["park_cap_seconds"], hanging["poll_interval_seconds"])
    )
    lines.append("| | deadline -> next rung queued | last deadline -> GCP command started |")
    lines.append("|---|---|---|")
    lines.append(_row("a sink that never answers", hanging[key], hanging[started]))
    if base is not None and base_started is not None:
        lines.append(_row("no sink", base, base_started))
    elif plain is not None:
        lines.append(_row("no sink (section a's run)", plain[key], plain[started]))
    received = [run.get("requests_received_by_the_hanging_sink") for run in hanging.get("runs", [])]
    if received and all(n is not None for n in received):
        lines.append(
            f"\nThe receiver read {', '.join(str(n) for n in received)} request(s) in the runs: each attempt waits the "
            "sink's 30 s timeout, so its sender was inside an unanswered request for the whole of each run."
        )
    lines.append("")
    where = (real_provenance or provenance)(hanging).replace("  \n", "; ").strip()
    lines.append(f"- {where}\n")
    return lines
