"""`fellows-fsm simulate` through the CLI entry point: JSON keys, the table, refused traces."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fellows_fsm.cli import main

KEYS = {"strategy", "park_cap_seconds", "free_share", "p50_start_seconds", "p95_start_seconds", "gcp_gpu_hours"}


def run(*args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; return exit code, stdout, stderr."""
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_simulate_json_has_the_documented_keys_per_strategy_and_cap() -> None:
    """--json prints one object per strategy and park cap, with the documented keys."""
    code, out, _ = run("simulate", "--hours", "6", "--park-caps", "60,600", "--json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["strategy"], r["park_cap_seconds"]) for r in rows} == {
        (s, c)
        for s in ("static", "single-timeout", "ladder", "reason-aware", "predictive", "oracle")
        for c in (60, 600)
    }
    for row in rows:
        assert KEYS | {"rung_changes"} <= set(row)
        assert 0.0 <= row["free_share"] <= 1.0


def test_simulate_table_lists_every_strategy() -> None:
    """Without --json the result is a table naming each strategy."""
    code, out, _ = run("simulate", "--hours", "6", "--park-caps", "300", "--strategies", "static,ladder")
    assert code == 0
    assert "static" in out
    assert "ladder" in out


def test_malformed_trace_line_is_refused_with_its_line_and_key(tmp_path: Path) -> None:
    """A trace whose second line has a bad key exits 3 with one line naming the file, line 2 and the key."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"submit_at": 0, "gpus": 8, "duration": 600, "user": "me"}\n'
        '{"submit_at": 10, "gpus": "eight", "duration": 600, "user": "me"}\n'
    )
    code, out, err = run("simulate", "--trace", str(trace), "--json")
    assert code == 3
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert str(trace) in lines[0]
    assert "line 2" in lines[0]
    assert "gpus" in lines[0]


def test_simulate_plays_the_park_early_strategies_on_a_trace_with_time_limits(tmp_path: Path) -> None:
    """ladder, reason-aware, predictive and oracle all play a trace whose lines carry time_limit."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"submit_at": 0, "gpus": 8, "duration": 600, "user": "me", "time_limit": 1200}\n'
        '{"submit_at": 0, "gpus": 8, "duration": 600, "user": "me", "time_limit": 6000}\n'
        '{"submit_at": 5, "gpus": 8, "duration": 600, "user": "me"}\n'
        '{"submit_at": 0, "gpus": 48, "duration": 900, "user": "u1", "qos": "low-eur", "time_limit": 1800}\n'
    )
    code, out, _ = run(
        "simulate", "--trace", str(trace), "--strategies", "ladder,reason-aware,predictive,oracle",
        "--park-caps", "60", "--json",
    )  # fmt: skip
    assert code == 0
    rows = json.loads(out)
    assert [r["strategy"] for r in rows] == ["ladder", "reason-aware", "predictive", "oracle"]


def test_a_bad_time_limit_is_refused_with_its_line(tmp_path: Path) -> None:
    """A time_limit under the job's duration exits 3 with one line naming the file, the line and the key."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"submit_at": 0, "gpus": 8, "duration": 600, "user": "me"}\n'
        '{"submit_at": 0, "gpus": 8, "duration": 600, "user": "me", "time_limit": 300}\n'
    )
    code, _, err = run("simulate", "--trace", str(trace), "--strategies", "predictive", "--park-caps", "60")
    assert code == 3
    line = err.strip()
    assert "line 2" in line
    assert "'time_limit' is 300" in line


def test_simulate_plays_calibrated_through_the_router() -> None:
    """--strategies calibrated runs the real Router with park_early calibrated: on the built-in workload at 600 s it
    pays GCP no more than own-cap (reason-aware) and starts the median job sooner."""
    code, out, _ = run("simulate", "--park-caps", "600", "--strategies", "reason-aware,calibrated", "--json")
    assert code == 0
    rows = {r["strategy"]: r for r in json.loads(out)}
    assert rows["calibrated"]["gcp_gpu_hours"] <= rows["reason-aware"]["gcp_gpu_hours"]
    assert rows["calibrated"]["p50_start_seconds"] < rows["reason-aware"]["p50_start_seconds"]
