"""The docs/benchmarks.md rows of issue 40's last target, the tick at 10,000 live within 1.10x of ``fa5401a`` (main
when the issue was filed), judged on every round of one run of benchmark c (``benchmarks.controller_cost --rounds N
--name controller_cost_tick3``: benchmarks/results/controller_cost_tick3.json), appended by benchmarks/render.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RESULT = "controller_cost_tick3"
BAR = 1.10
SIZE = "10000"
TICKS = (
    ("first steady", "first_steady_tick_cpu_ms_excluding_observe"),
    ("later steady", "later_steady_tick_cpu_ms_excluding_observe"),
    ("first moving", "first_moving_tick_cpu_ms_excluding_observe"),
    ("later moving", "later_moving_tick_cpu_ms_excluding_observe"),
)
"""The tick figures the bar is held to (CPU ms per tick, the fake port's observe excluded)."""


def _ratios(sizes: dict[str, Any], stat: str) -> list[float]:
    old, new = sizes[SIZE]["old"], sizes[SIZE]["new"]
    return [round(new[key][stat] / old[key][stat], 3) for _, key in TICKS]


def _rounds(r: dict[str, Any]) -> list[dict[str, Any]]:
    return list(r.get("rounds") or [{"date": r["date"], "loadavg": None, "sizes": r["sizes"]}])


def targets(r: dict[str, Any] | None) -> list[str]:
    """The targets table's row."""
    label = "10,000 live: every tick's median within 1.10x of `fa5401a` (issue 40; benchmark c, every round of one run)"
    if r is None:
        return [f"| {label} | not run | - |"]
    worst = max(max(_ratios(round_["sizes"], "median")) for round_ in _rounds(r))
    return [f"| {label} | worst {worst:.2f}x over {len(_rounds(r))} rounds | {'yes' if worst <= BAR else 'NOT met'} |"]


def section(r: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    """The subsection's lines."""
    lines = [
        "**The tick at 10,000 live, every round of one run** (issue 40's last target: every median within 1.10x "
        "of `fa5401a`):\n"
    ]
    if r is None:
        return [
            *lines,
            f"Not run: `nice -n 5 .venv/bin/python -m benchmarks.controller_cost --sizes 10000 "
            f"--repeats 5 --rounds 4 --baseline fa5401a --name {RESULT}`.\n",
        ]
    lines += [
        provenance(r),
        f"Old and new alternate run by run, {r['repeats']} fresh processes of each per round; old is "
        f"`{r['baseline']}`, new `{r['new']}`. Each cell: the median of the round's new ticks against the old "
        "ones' (the min against the min in brackets).\n",
        "| round: began (UTC), load average then | " + " | ".join(name for name, _ in TICKS) + " | `Router.dispatch` a "
        "second, new against old |",
        "|---|" + "---|" * (len(TICKS) + 1),
    ]
    worst = 0.0
    for round_ in _rounds(r):
        sizes = round_["sizes"]
        medians, mins = _ratios(sizes, "median"), _ratios(sizes, "min")
        worst = max(worst, *medians)
        old, new = sizes[SIZE]["old"], sizes[SIZE]["new"]
        rate = f"{new['dispatches_per_second']['median']:,} against {old['dispatches_per_second']['median']:,}"
        load = "" if round_["loadavg"] is None else f", {round_['loadavg']:.2f}"
        cells = " | ".join(
            f"{'**' if m > BAR else ''}{m:.2f}x{'**' if m > BAR else ''} ({n:.2f}x)"
            for m, n in zip(medians, mins, strict=True)
        )
        lines.append(f"| {round_['date'][11:16]}{load} | {cells} | {rate} |")
    lines.append("")
    verdict = "met" if worst <= BAR else "NOT met"
    lines.append(
        f"Every tick figure's median at most {worst:.2f}x `{r['baseline']}`'s in every round: the target is {verdict} "
        "in this run.\n"
    )
    return lines
