"""The docs/benchmarks.md rows and section of issue 27's two measured targets, from benchmarks/results/
paid_follow.json (benchmarks/paid_follow.py), spend_read.json (benchmarks/spend_read.py) and spend.json
(benchmarks/spend.py), appended by benchmarks/render.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.common import note

HEADING = "## The paid lane (issue 27): Batch API calls per poll, and `spend` over a large journal\n"
TARGET_SIZES = (1, 10, 100, 1000)
"""The paid dispatches per lane the one-list target is judged on (a run at 1,001 shows the second page)."""
SPEND_TARGET_SECONDS = 1.0


def _ms(v: dict[str, Any]) -> str:
    """min / median / max of seconds, in ms."""
    return " / ".join(f"{v[k] * 1000:.1f} ms" for k in ("min", "median", "max"))


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def _judged(follow: dict[str, Any]) -> list[dict[str, Any]]:
    return [run for run in follow["runs"] if run["paid_dispatches"] in TARGET_SIZES]


def _spend_worst(spend: dict[str, Any]) -> tuple[str, float]:
    """What the spend target is judged on: the command's max wall when it ran, else the read and spend's."""
    if spend.get("cli"):
        note = spend["cli"].get("source_note")
        return "`fellows-fsm spend --json` as a process" + (f", {note}" if note else ""), spend["cli"]["wall_seconds"][
            "max"
        ]
    return "open + `Journal.paid_runs()` + `spend()` in process", spend["read_and_spend_seconds"]["max"]


def targets(follow: dict[str, Any] | None, spend: dict[str, Any] | None) -> list[str]:
    """The rows of the Targets table."""
    rows = []
    if follow is not None:
        judged = _judged(follow)
        sizes = ", ".join(f"{run['paid_dispatches']:,}" for run in judged)
        most = max(run["lists_per_interval"]["max"] for run in judged)
        fewest = min(run["lists_per_interval"]["min"] for run in judged)
        rows.append(
            f"| one Batch API list call per poll interval for all paid jobs of a lane ({sizes} paid dispatches, the "
            f"fake Batch API) | min {fewest}, max {most} list requests per interval | {_met(most == 1 == fewest)} |"
        )
        ok = all(run["cancel"]["deletes_at_once"] == run["paid_dispatches"] for run in follow["runs"]) and all(
            run["cancel"][f"after_{run['polls']}_more_polls"]["deletes"] == run["paid_dispatches"]
            for run in follow["runs"]
        )
        rows.append(
            "| a cancel of every paid job: one delete request per job, never asked again | "
            + ", ".join(
                f"{run['cancel']['deletes_at_once']:,} for {run['paid_dispatches']:,}" for run in follow["runs"]
            )
            + f" | {_met(ok)} |"
        )
    else:
        rows.append("| one Batch API list call per poll interval for all paid jobs of a lane | not run | - |")
    if spend is not None:
        what, worst = _spend_worst(spend)
        rows.append(
            f"| `spend` over a journal of {spend['journal']['dispatches']:,} finished paid dispatches < "
            f"{SPEND_TARGET_SECONDS:g} s ({what}) | max {worst:.3f} s | {_met(worst < SPEND_TARGET_SECONDS)} |"
        )
    else:
        rows.append("| `spend` over a journal of 100,000 finished dispatches < 1 s | not run | - |")
    return rows


def section(
    follow: dict[str, Any] | None,
    spend: dict[str, Any] | None,
    arithmetic: dict[str, Any] | None,
    provenance: Callable[[dict[str, Any]], str],
) -> list[str]:
    """The section's lines: the follow's calls and times per size, then the spend's read, arithmetic and command."""
    lines = [HEADING, "### One list call per poll interval (benchmarks/paid_follow.py)\n"]
    if follow is None:
        lines.append("Not run: `.venv/bin/python -m benchmarks.paid_follow`.\n")
    else:
        lines += _follow(follow, provenance)
    lines.append("### `spend` over a journal of finished paid dispatches (benchmarks/spend_read.py)\n")
    if spend is None:
        lines.append("Not run: `.venv/bin/python -m benchmarks.spend_read`.\n")
    else:
        lines += _spend(spend, provenance)
    if arithmetic is not None:
        lines += _arithmetic(arithmetic, provenance)
    return lines


def _follow(r: dict[str, Any], provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    poll = r["runs"][0]["poll_interval_seconds"]
    lines = [
        "The real Router on the shipped FakeScheduler (nothing starts, so every dispatch walks the whole ladder) with "
        'a `kind = "gcp-batch"` lane whose `api_endpoint` is the loopback fake of the Batch API '
        "(lanes/gcp_batch/fake.py, "
        "reached through Google's own client library, as the lane's unit tests do), on a simulated clock. N "
        "dispatches are handed to the lane (N creates); once all are PAID_QUEUED the fake moves every other job to "
        f"RUNNING, and the router polls {r['runs'][0]['polls']} times one poll interval ({poll:g} s) apart, with a "
        "poll half an interval after each too (one that must not look). *lists per interval*: the fake's list "
        "requests in each interval (both polls); *look*: wall time of the lane's `look` (the list request, the "
        "client library's parsing, the mapping to the dispatches), which is nearly all of the poll's; *poll*: the "
        "whole `Router.poll` that looked. Then every dispatch is cancelled (`Router.withdraw`), and polled as many "
        "times again. Values are min / median / max over the polls.\n",
        provenance(r),
        "| paid dispatches | creates | lists per interval | lists in the half-interval polls | look | poll | "
        "the list page as plain HTTP, no library | deletes for the cancel of all (after the polls) | lists after "
        "the cancel | cancel of all, wall |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        c = run["cancel"]
        after = c[f"after_{run['polls']}_more_polls"]
        lists = run["lists_per_interval"]
        lines.append(
            f"| {run['paid_dispatches']:,} | {run['creates']:,} | {lists['min']} / {lists['median']:g} / "
            f"{lists['max']} | {run['lists_in_the_half_interval_polls']['max']} at most | "
            f"{_ms(run['look_wall_seconds'])} | {_ms(run['poll_wall_seconds'])} | {_raw(run.get('raw_list'))} | "
            f"{c['deletes_at_once']:,} "
            f"({after['deletes']:,}) | {after['lists']} | {c['wall_seconds_for_all']} s |"
        )
    lines.append("")
    lines.append(
        "One look is one `list_jobs` call of the client library, filtered on the lane's label, in pages of "
        "`lanes/gcp_batch/client.py: PAGE_SIZE` = 1,000 jobs: so up to 1,000 paid jobs of a lane are one request per "
        "poll interval whatever their number, and 1,001 are two (the row above: the one call's second page). The "
        "look's time grows with the jobs listed (each job's JSON is written by the fake and parsed into the "
        "library's message types in this same process, on this shared 2-core machine): it is the one per-job "
        "cost of a poll of paid jobs; the same page fetched as plain HTTP (the column beside it) shows how little "
        "of it is the request: the rest is the library turning the JSON into its messages (`json_format.Parse`, "
        "pure Python here, about three quarters of a 1,000-job look under cProfile) and reading them "
        "(`BatchJob.from_api`). A partial response (the API's `fields` parameter: name, labels, state, run "
        "duration) could cut it; not tried here. Every cancel is journaled (WITHDRAWN) before its one delete; no "
        "delete is asked again and nothing is listed once no paid job is followed. The fake answers with TCP_NODELAY "
        "(before "
        "this run each of its answers on a kept-alive connection waited about 40 ms for the client's delayed ACK, "
        "which no real API adds).\n"
    )
    return lines


def _raw(raw: dict[str, Any] | None) -> str:
    if raw is None:
        return "-"
    return f"{raw['min_wall_seconds'] * 1000:.1f} ms ({raw['bytes'] / 1000:,.0f} kB, {raw['jobs_listed']:,} jobs)"


def _secs(v: dict[str, Any]) -> str:
    return " / ".join(f"{v[k]:.4f} s" for k in ("min", "median", "max"))


def _spend(r: dict[str, Any], provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    j = r["journal"]
    status = ", ".join(f"{n:,} {s}" for s, n in sorted(j["paid_run_status"].items()))
    lines = [
        "The journal is written by the real driver, not by a bulk insert: the real Router on the shipped "
        "FakeScheduler (nothing starts) with four in-memory paid lanes (testing.FakePaidLane: `gcp` after the "
        "ladder, 3.2 a GPU-hour; `gcp-eu` 2.9, `sky` 2.5 and `runpod` unpriced, pinned), on a simulated clock: "
        "batches of 200 dispatches over the three months before *now* (1 to 16 GPUs, a time limit of 30 min to "
        "24 h), each paid job running at once for a random part of its limit and ending succeeded, failed, or "
        "cancelled by the user (`Router.withdraw`: one delete). So every row (dispatches, transitions, jobs, "
        "handoffs, paid_runs) is written by the executor, the paid follower and the withdrawal in their own "
        "transactions, as in production; the run ends fall on a 5-minute grid of the simulated clock. "
        + (
            "This journal holds two such builds of 100,000 (the same seed, 20 minutes apart, the second run of the "
            "command writing into the kept journal of the first), so 200,000 dispatches over the same three months: "
            "twice the issue's size. "
            if j["dispatches"] == 200_000
            else ""
        )
        + f"The journal: {j['dispatches']:,} dispatches ({status}; handed off from {j['handed_from'][:10]} to "
        f"{j['handed_to'][:16]}), {j['journal_mb']} MB, built in {j['build_seconds']} s ({j['polls']:,} polls). "
        f"*now* is {r['now'][:19]} UTC: the day, week and month windows start at or after "
        f"{r['windows_start'][:10]}, so {r['runs_since_windows_start']:,} runs are in them "
        f"(day {r['runs_in']['day']:,}, week {r['runs_in']['week']:,}, month {r['runs_in']['month']:,}). Each "
        "figure is min / median / max of the repeats on the same warm journal.\n",
        provenance(r),
        "| figure | wall |",
        "|---|---|",
    ]
    read = r["read_seconds"]
    rows = [
        (f"(a) `Journal.paid_runs()`: every run ({r['runs_read']:,}), journal open", read["paid_runs_all"]),
        (
            f"(a) `Journal.paid_runs(since=...)`: the {r['runs_since_windows_start']:,} runs of the windows",
            read["paid_runs_since_windows_start"],
        ),
        ("(a) `Journal(path, readonly=True)` opened, then `paid_runs()` of every run", read["open_and_paid_runs_all"]),
        (
            "(a) `Journal(path, readonly=True)` opened, then `paid_runs(since=...)`",
            read["open_and_paid_runs_since_windows_start"],
        ),
        (f"(b) `core/budget.py: spend` over every run read ({r['runs_read']:,})", r["spend_seconds"]["all_runs"]),
        ("(b) `spend` over the runs of the windows", r["spend_seconds"]["runs_since_windows_start"]),
        ("(a) + (b): open (read-only), read every run, `spend`", r["read_and_spend_seconds"]),
    ]
    if "open_to_write" in read:
        rows.append(
            (
                "(shown, not `spend`'s) `Journal(path)` opened to write: quick_check, every row read",
                read["open_to_write"],
            )
        )
    if r.get("cli"):
        cli = r["cli"]
        where = f" ({cli['source_note']})" if cli.get("source_note") else ""
        rows.append((f"(c) `{' '.join(cli['argv'])}` as a process{where}", cli["wall_seconds"]))
    lines += [f"| {name} | {_secs(v)} |" for name, v in rows]
    lines.append("")
    if not r.get("cli"):
        lines.append(
            "(c) `fellows-fsm spend --json` as a process: not measured; the command (branch paidviews, ui/spend.py) "
            "was not in this checkout when this ran. benchmarks/spend_read.py runs it when `fellows-fsm --help` "
            "lists it: rerun the command above once it has landed.\n"
        )
    return lines


def _arithmetic(r: dict[str, Any], provenance: Callable[[dict[str, Any]], str]) -> list[str]:
    lines = [
        *note("spend_since"),
        "The arithmetic alone, on runs built in memory (benchmarks/spend.py: no journal; 100,000 runs over three "
        "months, all in this month, or all today, the pass's worst case), wall min / median / max:\n",
        provenance(r),
        "| case | runs in day / week / month | `spend` | `BudgetGate` |",
        "|---|---|---|---|",
    ]
    for case in r["cases"]:
        n, a = case["runs_in"], case["arithmetic"]
        lines.append(
            f"| {case['case']} | {n['day']:,} / {n['week']:,} / {n['month']:,} | {_secs(a['spend']['wall_seconds'])} "
            f"| {_secs(a['gate']['wall_seconds'])} |"
        )
    lines.append("")
    return lines
