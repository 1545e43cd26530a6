"""What the command-line tests share: the scheduling fake cluster, the grants, a config in a directory, running the
CLI in-process, and the checks that a refused command left the world as it was. The fixtures built on them
(``scheduling_fake``, ``drivers``, ``env``, ``script``) are in conftest.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner, Result

from fellows_fsm import FakeScheduler, JobSpec, Observation, SystemClock, cli
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.journal import reads as journal_module
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.slurm.accounting import Association, Grants, QosInfo
from fellows_fsm.testing import Driven
from fellows_fsm.ui import app as ui_app

CAPS = {"high-eur": 16, "normal-eur": 16, "dev-eur": 8}
PRIORITY = {"dev-eur": 200000, "high-eur": 100000, "normal-eur": 50000, "low-eur": 10000}
DISPATCH_KEYS = {"dispatch_id", "state", "lane", "qos", "slurm_job_id", "final", "result", "exit_code", "outcome"}
HISTORY_KEYS = {"at", "from", "to", "trigger", "qos", "slurm_job_id", "reason", "note"}


class SchedulingFake(FakeScheduler):
    """The fake cluster, scheduling its queue before every observation as slurmctld would between polls."""

    def __init__(self, *, scheduling: bool = True, **kwargs: object) -> None:
        super().__init__(SystemClock(), **kwargs)  # type: ignore[arg-type]
        self.scheduling = scheduling
        self.run_seconds: float | None = None
        """A job that ran this long has completed (exit 0) at the next observation; None: jobs run for ever."""

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """End the jobs that ran ``run_seconds`` (if set), schedule (if on), then observe."""
        if self.run_seconds is not None:
            now = self.clock.now()
            for job in list(self.jobs.values()):
                if job.state == "RUNNING" and job.start_time is not None and now - job.start_time >= self.run_seconds:
                    self.end(job.job_id)
        if self.scheduling and not self.unreachable:
            self.schedule()
        return super().observe(job_ids)


def _config_text(state_dir: Path, ledger: Path, *, fail_gcp: bool = False, extra: str = "") -> str:
    code = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    if fail_gcp:
        code += "; sys.exit('quota exceeded in europe-west4')"
    command = json.dumps([sys.executable, "-c", code, str(ledger), "{dispatch_id}"])
    # Running jobs are looked at every poll (their ends recorded at once), unless the test's lines say otherwise.
    router = "" if "[router]" in extra else "\n[router]\nfollow_interval_seconds = 0.05\n"
    return f"""
state_dir = "{state_dir}"

[fellows]
park_cap_seconds = 0.3
poll_interval_seconds = 0.05
{extra}
{router}
[lanes.gcp]
command = {command}
"""


LADDER_GRANTS = Grants(
    user="me",
    associations=(
        Association("fellows", "lab-acct", "me", "", frozenset({"high-eur", "normal-eur", "low-eur"}), "normal-eur"),
    ),
    qos={
        "high-eur": QosInfo("high-eur", 100000, 7 * 86400, 16),
        "normal-eur": QosInfo("normal-eur", 50000, 7 * 86400, 16),
        "low-eur": QosInfo("low-eur", 10000, 14 * 86400, None),
    },
)
"""What sacctmgr grants the user on the fellows cluster: the three rungs (a 16-GPU cap on the first two)."""
GRANTS = attrs.evolve(LADDER_GRANTS, qos={**LADDER_GRANTS.qos, "dev-eur": QosInfo("dev-eur", 200000, 86400, 8)})
"""The command-line tests' grants: the ladder's, and dev-eur (8 GPUs) for a debug QoS."""


def run(*args: str) -> Result:
    """Invoke fellows-fsm with ``args`` in-process."""
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


def fill(fake: FakeScheduler, qos: str, gpus: int = 16) -> None:
    """Run the user's own 8-GPU jobs on ``qos`` so that its per-user GPU cap is full."""
    for _ in range(gpus // 8):
        fake.start(fake.add_job(JobSpec("load", "load.sbatch", gpus=8), qos=qos).job_id)


def ledger(env: Path) -> list[str]:
    """The dispatch ids the gcp lane's command was run for."""
    path = env / "gcp.ledger"
    return path.read_text().split() if path.exists() else []


def one_error_line(result: Result) -> str:
    """The single stderr line of a failed command (and no traceback), besides the note of a driver started."""
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(ui_app.STARTED)]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    assert lines[0].startswith("fellows-fsm: error: ")
    return lines[0]


# --------------------------------------------------------------------------- bad input: refused, nothing queued
def _toml(env: Path, *, fellows: str = "", router: str = "", gcp: str | None = None, top: str = "") -> str:
    """A config in ``env`` with the given [fellows] and [router] lines and [lanes.gcp] command (default: ledger)."""
    code = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    command = gcp or json.dumps([sys.executable, "-c", code, str(env / "gcp.ledger"), "{dispatch_id}"])
    for key, value in (("park_cap_seconds", "0.3"), ("poll_interval_seconds", "0.05")):
        if key not in fellows:
            fellows += f"\n{key} = {value}"
    if "follow_interval_seconds" not in router:
        router += "\nfollow_interval_seconds = 0.05"
    return (
        f'{top}\nstate_dir = "{env / "state"}"\n\n[fellows]\n{fellows}\n\n[router]\n{router}\n\n'
        f"[lanes.gcp]\ncommand = {command}\n"
    )


def world(env: Path, fake: FakeScheduler) -> tuple[object, ...]:
    """Everything a refused command must leave as it was: the journal's rows and steps, and the queued jobs."""
    path = env / "state" / "journal.sqlite3"
    rows: list[object] = []
    if path.exists():
        journal = Journal(path)
        try:
            rows = [(r, journal.steps(r.id), journal.jobs(r.id)) for r in journal.dispatches()]
        finally:
            journal.close()
    return (rows, sorted((j.job_id, j.qos, j.state) for j in fake.jobs.values()), ledger(env))


def refused(result: Result, code: int, *words: str) -> str:
    """Assert ``result`` exited ``code`` with one error line containing every word; return the line."""
    assert result.exit_code == code, result.output
    line = one_error_line(result)
    for word in words:
        assert word in line, line
    return line


def _journal_of(env: Path, dispatches: int, live: int) -> list[str]:
    """Fill the env's journal with ``dispatches`` dispatches, the oldest ``live`` still pending, the others ended
    (their job ran and completed); their ids."""
    clock = SystemClock()
    fake = FakeScheduler(clock)
    ladder = SlurmSettings(park_cap_seconds=600).ladder
    journal = Journal(env / "state" / "journal.sqlite3")
    ids = []
    try:
        for i in range(dispatches):
            d = Driven(Dispatch(f"{i:02d}{'f' * 10}", JobSpec(f"job-{i}", "job.sbatch", gpus=8), ladder), fake, journal)
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=1_700_000_000.0 + i)
            d.submit()
            if i >= live:
                assert d.job_id is not None
                fake.start(d.job_id)
                d.advance(fake.observe([d.job_id])[d.job_id])
                fake.end(d.job_id)  # a final dispatch: its job ran and ended (RUNNING is followed)
                d.advance(fake.observe([d.job_id])[d.job_id])
            ids.append(d.id)
    finally:
        journal.close()
    return ids


def _count_parsed_rows(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the id of every dispatch row the journal parses (its JSON columns) from now on."""
    parsed: list[str] = []
    original = journal_module._dispatch_row

    def counting(row: Any) -> Any:
        parsed.append(row["id"])
        return original(row)

    monkeypatch.setattr(journal_module, "_dispatch_row", counting)
    return parsed
