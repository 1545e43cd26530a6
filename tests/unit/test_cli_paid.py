"""submit of a dispatch pinned to a followed paid lane (a command lane with status and cancel): it returns once the
paid job has started (or, with --detach, once the lane has it), never waits for the paid job's end, and the driver
follows it on; cancel then deletes it once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fellows_fsm.journal.store import Journal
from tests.unit.cli_helpers import SchedulingFake, _config_text, run

STATUS = "import sys, pathlib; print(pathlib.Path(sys.argv[1]).read_text())"
CANCEL = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"


def followed(env: Path, word: str) -> Path:
    """Give the env's gcp lane a status that prints ``word`` (from a file the test can change) and a cancel that
    records the dispatch id; return the status file."""
    said = env / "status.txt"
    said.write_text(word)
    status = json.dumps([sys.executable, "-c", STATUS, str(said)])
    cancel = json.dumps([sys.executable, "-c", CANCEL, str(env / "cancel.ledger"), "{dispatch_id}"])
    text = _config_text(env / "state", env / "gcp.ledger") + f"status = {status}\ncancel = {cancel}\n"
    (env / "fellows.toml").write_text(text)
    return said


def test_submit_pinned_to_a_followed_lane_returns_once_the_paid_job_runs(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A foreground submit follows a paid job until it runs (PAID_RUNNING), as it does a free one until RUNNING:
    it never waits for a paid job's end."""
    followed(env, "running on a3-highgpu-8g")
    result = run("submit", "--pin", "gcp", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["final"]) == ("PAID_RUNNING", False)


def test_submit_detach_pinned_to_a_followed_lane_returns_once_the_lane_has_the_job(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """--detach returns once the paid lane has the job (queued), with the id alone; cancel deletes it once."""
    followed(env, "queued")
    result = run("submit", "--pin", "gcp", "--detach", str(script))
    assert result.exit_code == 0, result.output
    dispatch_id = result.stdout.strip()
    with Journal(env / "state" / "journal.sqlite3") as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert row.state in ("PAID_QUEUED", "PAID_RUNNING")
    cancelled = run("cancel", dispatch_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert (env / "cancel.ledger").read_text().split() == [dispatch_id]
    with Journal(env / "state" / "journal.sqlite3") as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert (row.state, row.outcome) == ("WITHDRAWN", "withdrawn")
