"""What every test run shares: with FELLOWS_TEST_REPORT set (scripts/shards.py sets it for each shard), each test's
outcome and wall time are written there as JSON at the end of the run, keyed by the test's own node id, so the
shard runner can report and balance by exact ids without parsing pytest's output."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

_REPORT_ENV = "FELLOWS_TEST_REPORT"
_results: dict[str, dict[str, object]] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Every command a test runs finds no user config of whoever runs the tests (config/discover.py looks in
    $XDG_CONFIG_HOME last): an empty directory of the run's own; a test that wants one sets its own."""
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="fellows-tests-xdg-config-")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum a test's setup, call and teardown time; its outcome is the worst of its phases."""
    if not os.environ.get(_REPORT_ENV):
        return
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "duration": 0.0})
    entry["duration"] = float(entry["duration"]) + report.duration
    if hasattr(report, "wasxfail"):
        entry["outcome"] = "xpassed" if report.passed and report.when == "call" else "xfailed"
    elif report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the collected outcomes (even when the run stops early: the runner reads what ran)."""
    target = os.environ.get(_REPORT_ENV)
    if not target:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"collected": session.testscollected, "tests": _results}, indent=1))
