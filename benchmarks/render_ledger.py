"""The docs/benchmarks.md section of issue 42 (the shared ledger): a handoff's reservation round trip on loopback,
and many machines' handoffs against one team budget (benchmarks/results/ledger_reserve.json,
benchmarks/ledger_reserve.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADING = "## The shared ledger (issue 42): a reservation's round trip, and 4 machines against one budget\n"


def _pct(v: dict[str, Any]) -> str:
    return " / ".join(f"{v[k]:.1f} ms" for k in ("p50", "p95", "max")) + f" (n={v['n']})"


def section(r: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    """The section's lines."""
    lines = [HEADING]
    if r is None:
        return [*lines, "Not run yet (`.venv/bin/python -m benchmarks.ledger_reserve`, then the render).\n"]
    a, b = r["a"], r["b"]
    lines.append(
        f"On {r['server']}. (a) One driver's gate (`driver/ledger.py`: `LedgerGate.refusal`, as a last free rung's "
        f"guard asks it), {a['asks']} handoffs one after another, each a new dispatch that fits: the whole "
        "transaction (the user's budget row locked, the confirm of a reservation already held, which finds none "
        "here, the sums, the insert, the commit) on the driver's kept connection, each call under its own deadline "
        f"(`ledger/deadline.py`: a timer thread per call), p50 / p95 / max: **{_pct(a['ask_ms'])}** (with fsync "
        "off: a production server adds its disk's commit).\n"
    )
    lines.append(
        f"(b) {b['machines']} processes (one driver each, its own journal) of one team, {b['handoffs']} handoffs in "
        f"all released at once, against a team budget of {b['budget_jobs']:g} one-GPU-hour jobs a day: "
        f"**{b['passed']} passed** (never more than {b['budget_jobs']:g}); each ask under that contention (waiting "
        f"on the team's row lock included), p50 / p95 / max: **{_pct(b['ask_ms'])}**; all of them in "
        f"{b['wall_s']:.1f} s. This counts reservations made by the gate, not paid jobs made by real drivers "
        "(tests/integration/test_ledger_cli_real.py races real drivers).\n"
    )
    lines.append(f"- {provenance(r)}")
    lines.append(
        "It ran in its own network namespace, with a PostgreSQL of its own, after the reconcile moved off the tick "
        "and a handoff's ask began to confirm a held reservation (the host's load average was about 0.9; the "
        "previous run, 2026-12-07T03:11:10Z, at a load of about 4.5 from other work, measured 4.3 / 13.0 / 23.1 ms "
        "and 17.1 / 32.1 / 62.8 ms, 5.3 s: the difference is mostly the load, not the change): `scripts/in-netns "
        'ledger2b bash -c \'scripts/dev-postgres start && eval "$(scripts/dev-postgres env)" && .venv/bin/python -m '
        "benchmarks.ledger_reserve'`."
    )
    return lines
