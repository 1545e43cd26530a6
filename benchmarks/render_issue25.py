"""The docs/benchmarks.md subsection of section c for issue 25 (benchmark c at 10,000 live, after the fix), appended to
section c by benchmarks/render.py from the two results this issue's runs kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HEADING = "### Benchmark c at 10,000 live after issue 25\n"
AFTER = "controller_cost_issue25"
"""The issue's command, old = ab70597, new = this branch (the file benchmarks.controller_cost writes, renamed)."""
BEFORE = "controller_cost_issue25_main"
"""The same command with ``--baseline`` main before the fix (3666b49): old = main, new = this branch."""
TICKS = (
    ("first steady tick", "first_steady_tick_cpu_ms_excluding_observe"),
    ("later steady ticks", "later_steady_tick_cpu_ms_excluding_observe"),
    ("first moving tick (every window closes at once)", "first_moving_tick_cpu_ms_excluding_observe"),
    ("later moving ticks", "later_moving_tick_cpu_ms_excluding_observe"),
    ("every steady tick, observe included", "steady_tick_cpu_ms"),
    ("every moving tick, observe included", "moving_tick_cpu_ms"),
)
"""The tick figures of the subsection (CPU ms; observe excluded unless said)."""

WHERE = (
    "Where the time had gone (cProfile of one `Router.poll` of each kind at 10,000 live on the benchmark's own setup, "
    "`ab70597` against main `3666b49`; cProfile's call counts do not move with the machine's load, its times do, so "
    "the counts are given, and a bisection by call counts at 2,000 live over main's first-parent commits found where "
    "they grew). Calls per tick, ab70597 / main / this branch: first steady 400,082 / 600,169 / 450,161; later "
    "steady 100,081 / 140,168 / 90,160; first moving 219,235 / 278,948 / 225,334; later moving 224,307 / 285,605 / "
    "230,191. (1) Issue 28's calibrated-on-every-rung (`bd4be5d`, merged in `0a33e9e`: +10 calls per dispatch on a "
    "first look, +3 on every later one) dropped the policy attribute that `HistoryCache.get` asked before "
    "`Dispatch.calibrating` (4153f75 had put it there): every tick called the property, `policy.calibrates` and "
    "`len` for every live dispatch through a generator, 40,000 calls a tick at 10,000 live, on every tick kind. The "
    "same change dropped it from `cannot_start_in_window.until` (`core/lifecycle.py`, asked on every full look on a "
    "rung), and `early_park_reason` summed the later rungs' caps (`ladder_end`) on every look, which only the "
    "calibrated policies read. (2) On Python 3.11 an Enum member read off its class (`Phase.PENDING`, "
    "`ReasonGroup.HELD`) costs about 400 ns on this machine against 27 ns for a module name (timeit): "
    "a first look read six (`looks.checked`, `Dispatch.see`, `Dispatch._settle`, three in `policy.park_early_reason`), "
    "a quiet look one; and `rung_cannot_start` looked its reason group up in a frozenset, hashing the member through "
    "Enum's Python `__hash__`. (3) The rest: issue 18's table-driven look (6ee9609, made fast again in 26ce7a8) "
    "and the defer row before it (febe764), together +10 calls per first look and +1 per later look against "
    "ab70597 (the bisection: 100,152 and 22,151 calls at 26ce7a8 against 80,082 and 20,081), and issue 29's "
    "full-disk check (16b61fa, merged in 2cbb7b0: a new `path.parent` on every write transaction, about 400 a "
    "later moving tick, +2,262 calls a moving tick at 2,000 live).\n"
)
CHANGED = (
    "What changed (behaviour unchanged: the unit suite passes unchanged, no check dropped): `history.py`: "
    "`HistoryCache.get` asks `park_early in CALIBRATED` before the property, in a plain loop; `core/lifecycle.py`: "
    "`cannot_start_in_window.until` asks the attribute first, `early_park_reason` sums the caps only for a calibrated "
    "policy (`park_early_reason` reads `ladder_end` only for those), the never-starts groups are a tuple, and "
    "`early_park_reason` and `moved_by_others` read the rung's QoS without the `Dispatch.rung` property; "
    "`core/dispatch.py`, `core/looks.py`, `core/policy.py`, `scheduler.py` (`classify_reason`), `core/machine.py` "
    "(`_journal`, `fire`: every step): the Enum members read are module names, and `core/vocab.py`'s "
    "`is_final_state` asks `pinned` before reading one; `machine.first_row` goes on at once past a refused row with "
    "no clock or budget marks; "
    "`core/dispatch.py`: a look that matches its memo (`Dispatch._quiet`) returns the frozen Decision the memo's look "
    "returned instead of building one (the same effects, none, and the same wake time), so a quiet look allocates "
    "nothing; `journal_file.py`: the directory `check_room` is given is kept once. One look, timed apart (timeit "
    "in the benchmark's setup, 2,000 dispatches after their first observe, best of 40 passes, five processes per "
    "version alternating; min-max over the processes, median in brackets): a full first look (`advance` with no "
    "memo) ab70597 5.2-5.9 us (5.4), main 7.6-10.6 us (7.8), this branch 5.5-8.2 us (5.8); a look that matches "
    "its memo 1.5-1.7 us (1.7), 1.9-3.5 us (2.0), 1.1-2.1 us (1.1).\n"
)
KEPT = (
    "What is not won back, and what it buys: the defer row's guard (`job_moved_by_others`, febe764), one call of "
    "`moved_by_others` per first look, and the two fields it needs in every `Observation` (partition and time "
    "limit: a quiet look's memo compares ten fields, not eight), buy that a job someone else moved (`scontrol "
    "update` of its QoS, partition or time limit) is theirs, never walked; `first_row`'s clock and budget marks buy "
    "the memo that lets 9,800 budget-held dispatches of a moving tick return at once (`machine.clock_gates`); the "
    "full-disk check on every write transaction (one statvfs) buys that nothing is journaled, so nothing started, "
    "on a full state dir; issue 29's `Driver._call` / `_slow_answer` read the clock around each port call (200 a "
    "moving tick) so an unanswered or late call stops the window; the strays sweep builds nothing per dispatch "
    "while no lookup is outstanding, and the catch-up of unwatched time reads one journal attribute a tick: both "
    "kept as they were.\n"
)


def _cell(v: dict[str, Any]) -> str:
    return f"{v['min']} / {v['median']} / {v['max']}"


def _change(new: dict[str, Any], old: dict[str, Any]) -> str:
    return f"{100 * (new['median'] - old['median']) / old['median']:+.0f} %"


def _table(r: dict[str, Any], old_name: str) -> list[str]:
    size = r["sizes"]["10000"]
    rows = [
        f"| CPU ms per tick (min / median / max) | old: {old_name} | new: this branch (`{r['new']}`) | median, new "
        "against old |",
        "|---|---|---|---|",
    ]
    for label, key in TICKS:
        rows.append(
            f"| {label} | {_cell(size['old'][key])} | {_cell(size['new'][key])} | "
            f"{_change(size['new'][key], size['old'][key])} |"
        )
    slower = [
        f"{label} ({_change(size['new'][key], size['old'][key])}; the ranges "
        + ("overlap" if size["new"][key]["min"] <= size["old"][key]["max"] else "do NOT overlap")
        + ")"
        for label, key in TICKS[:4]
        if size["new"][key]["median"] > size["old"][key]["median"]
    ]
    verdict = (
        f"Observe excluded, {4 - len(slower)} of the 4 tick figures have the new median at or below the old; "
        + ("above it: " + ", ".join(slower) if slower else "none is above it")
        + ".\n"
    )
    return [*rows, "", verdict]


def section(
    after: dict[str, Any] | None, before: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str], nice: str
) -> list[str]:
    """The subsection's lines: the issue's command against ab70597 and, beside it, against main before the fix."""
    lines = [HEADING]
    if after is None:
        return [*lines, "Not run.\n"]
    lines.append(
        "Issue 25: on 2026-12-01 main was 14-29 % slower than `ab70597` at 10,000 live in every tick figure "
        "(first steady 55.1 against 42.7 ms median, later steady 15.3 against 13.4, moving 47.8 against 41.7). "
        "Reproduced on 2026-12-02 before the fix with the same command (its printed summary; main against ab70597, "
        "medians): first steady 175.5 against 139.6 ms, later steady 50.7 against 45.5, first moving 143.8 against "
        "143.1, later moving 161.8 against 139.5 (this shared machine ran about 3x slower than on 2026-12-01: its "
        "load). After the fix, the same command (its file, benchmarks/results/controller_cost.json, is kept as "
        f"`{AFTER}.json`, so the table of section c above keeps its three-size run):\n"
    )
    lines.append(provenance(after).replace("Command: `.venv", f"Command: `{nice} .venv"))
    lines += _table(after, f"`{after['baseline'][:7]}`")
    if before is not None:
        lines.append(
            f"The same command with `--baseline {before['baseline'][:7]}` (main before the fix, as old; its file kept "
            f"as `{BEFORE}.json`):\n"
        )
        lines.append(provenance(before).replace("Command: `.venv", f"Command: `{nice} .venv"))
        lines += _table(before, f"main before the fix (`{before['baseline'][:7]}`)")
    return [*lines, WHERE, CHANGED, KEPT]
