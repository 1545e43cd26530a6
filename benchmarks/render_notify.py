"""The docs/benchmarks.md section of issue 39 (notifications): step to delivery on loopback
(benchmarks/results/notify_delivery.json, benchmarks/notify_delivery.py), and benchmark a's decision overhead with a
sink that never answers against none (decision_overhead_hanging_sink.json against decision_overhead.json)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADING = "## Notifications (issue 39): step to delivery, and the walk with a sink that never answers\n"


def _pct(v: dict[str, Any], scale: float = 1000.0, unit: str = " ms") -> str:
    return " / ".join(f"{v[k] * scale:.1f}{unit}" for k in ("p50", "p95", "max")) + f" (n={v['n']})"


def section(
    delivery: dict[str, Any] | None,
    plain: dict[str, Any] | None,
    hanging: dict[str, Any] | None,
    provenance: Callable[[dict[str, Any]], str],
) -> list[str]:
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
    if hanging is None or plain is None:
        lines.append(
            "Decision overhead (benchmark a) with a sink that never answers: not run yet "
            "(`.venv/bin/python -m benchmarks.decision_overhead --hanging-sink` on the real SLURM, then the render).\n"
        )
        return lines
    key = "rung_deadline_to_next_job_queued_seconds"
    lines.append(
        "Decision overhead (benchmark a, dispatches 0.5 s apart) with every event sent to a loopback receiver that "
        "reads the request and never answers (timeout 30 s), against no sink; deadline -> next rung queued, p50 / "
        f"p95 / max: with the sink {_pct(hanging[key], 1.0, ' s')}, without {_pct(plain[key], 1.0, ' s')}.\n"
    )
    lines.append(f"- {provenance(hanging)}\n")
    return lines
