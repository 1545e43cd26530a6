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
FINAL = "controller_cost_issue25_final"
"""The issue's command on the final code (every branch of issue 25 merged, and the roster's shared settings and jobs):
old = ab70597."""
FINAL_MAIN = "controller_cost_issue25_final_main"
"""The same command on main e449ce6 (every branch merged, before the roster shared settings and jobs)."""
VS_BEFORE = "controller_cost_issue25_vs_3666b49"
"""The same command on the final code with ``--baseline 3666b49``: old = main before issue 25, new = the final code
(the issue's "no tick figure slower than before this change")."""
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


MEMORY = (
    "Where the dispatch rate and the memory went (tracemalloc of 2,000 `Router.dispatch` calls on the benchmark's "
    "setup, by allocation site): since the driver branch (`b36a18f`, merged in `e449ce6`) every dispatch is born by "
    "`enqueue` (its journal row) and `adopt` (as every tick adopts what other processes enqueued): `Router.dispatch` "
    "reads back the row it wrote (the journal's last row id, the new ids, the row, its steps and its jobs: five more "
    "SELECTs a dispatch), decodes its JSON and rebuilds the Dispatch with `journal/queries.py`: `restore` before the "
    "first submit. That read-back is the dispatch rate's cost (the rate's medians above), and it buys one birth path:"
    " a dispatch driven is exactly what the journal holds, whichever process enqueued it. The memory was the rows' "
    "decoded objects the roster kept: a Ladder each (the driver branch's `ceaa867` shares one per distinct ladder, "
    "`Roster.ladders`), and each row's settings dict (27 objects, 1.6 KB: the fallback lane's table and the config "
    "file's path, as fresh strings) and JobSpec (about 0.3 KB), where the Router before `e449ce6` kept the ones "
    "`admit` built (a settings dict each too, but of the config's own strings). Now `driver/roster.py`: `Kept` keeps "
    "one settings dict (by its JSON) and one JobSpec per distinct value (at most 1,024 distinct ones, then it starts "
    "over, so a long-lived driver keeps no value for ever; a value not kept is only not shared): tracemalloc 2,801 ->"
    " 1,008 bytes a dispatch, and 952 with `restore` interning the `park_early` word (the row's decoded one was "
    "kept); resident memory (allocator pages count) {main_bytes} -> {final_bytes} bytes a dispatch,"
    " against {old_bytes} for `ab70597`. The tick call counts (cProfile, one poll of each kind at 10,000 live: "
    "450,168 / 90,167 / 225,417 / 230,198 for first steady, later steady, first moving, later moving) are the perf "
    "branch merge's (`ce2acdc`) within 10 a tick, and +50,086 / -9,914 / +6,182 / +5,891 against `ab70597` (the costs "
    "the perf branch kept, said above): nothing merged since runs per dispatch on a tick. On main `e449ce6` the first"
    " steady tick was {main_first} ms median against {old_first} for `ab70597` with the ranges apart, with the same "
    "calls as `ce2acdc`: not code that runs per dispatch; most likely where the objects a first look reads lie in "
    "memory (on main they were allocated among each row's decoded objects, which stayed). With the roster sharing "
    "those it is {final_first} ms against {final_old_first}, the ranges overlapping; the medians of the first steady "
    "and the moving ticks stay above `ab70597`'s, inside the runs' spread.\n"
)


def _median(r: dict[str, Any], who: str, key: str) -> Any:
    return r["sizes"]["10000"][who][key]["median"]


def kept_run(
    r: dict[str, Any], heading: str, kept: str, provenance: Callable[[dict[str, Any]], str], nice: str
) -> list[str]:
    """One kept run: ``heading`` (its file named ``kept``, and the load average added to it by hand:
    {"values": [1, 5, 15 min], "when": "..."}), the command, the tick table, the dispatch rate and memory."""
    load = r.get("load_average")
    lines = [
        f"{heading} (its file kept as `{kept}.json`"
        + (f"; load average {' / '.join(f'{v:.2f}' for v in load['values'])} {load['when']}" if load else "")
        + "):\n",
        provenance(r).replace("Command: `.venv", f"Command: `{nice} .venv"),
        *_table(r, f"`{r['baseline'][:7]}`"),
    ]
    rate = [_median(r, w, "dispatches_per_second") for w in ("old", "new")]
    memory = [_median(r, w, "bytes_per_dispatch") for w in ("old", "new")]
    lines.append(
        f"Dispatches a second (median) old {rate[0]}, new {rate[1]}; bytes a dispatch (resident, median) old "
        f"{memory[0]}, new {memory[1]}.\n"
    )
    return lines


def final(
    final: dict[str, Any] | None,
    main: dict[str, Any] | None,
    provenance: Callable[[dict[str, Any]], str],
    nice: str,
) -> list[str]:
    """The subsection's last part: the issue's command on the final code and on main before its memory fix."""
    lines = ["#### On the final code (every branch of issue 25 merged)\n"]
    if final is None or main is None:
        return [*lines, "Not run.\n"]
    for r, who in ((main, "main `e449ce6`, before the roster shared settings and jobs"), (final, "the final code")):
        lines += kept_run(r, f"The command below on {who}", FINAL if r is final else FINAL_MAIN, provenance, nice)
    first = "first_steady_tick_cpu_ms_excluding_observe"
    lines.append(
        MEMORY.format(
            main_bytes=_median(main, "new", "bytes_per_dispatch"),
            final_bytes=_median(final, "new", "bytes_per_dispatch"),
            old_bytes=_median(final, "old", "bytes_per_dispatch"),
            main_first=_median(main, "new", first),
            old_first=_median(main, "old", first),
            final_first=_median(final, "new", first),
            final_old_first=_median(final, "old", first),
        )
    )
    return lines


def against_before(r: dict[str, Any] | None, provenance: Callable[[dict[str, Any]], str], nice: str) -> list[str]:
    """The final code against main before issue 25 (3666b49), in one run: the issue's "no tick figure slower"."""
    lines = ["#### The final code against main before issue 25\n"]
    if r is None:
        return [*lines, "Not run.\n"]
    heading = f"The command below, old = main before issue 25 (`{r['baseline'][:7]}`), new = the final code"
    return [*lines, *kept_run(r, heading, VS_BEFORE, provenance, nice)]
