"""The command group of ui/app.py: usage errors, --debug, the --config option, and the `python -m` entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fellows_fsm import cli
from tests.unit.cli_helpers import SchedulingFake, run


@pytest.mark.parametrize(
    "args",
    [("submit", "--intent", "bogus", "x.sbatch"), ("submit", "missing.sbatch"), ("history",), ("nonsense",)],
    ids=["bad-choice", "missing-script", "missing-argument", "unknown-command"],
)
def test_usage_errors_exit_2(env: Path, args: tuple[str, ...]) -> None:
    """Usage errors are click's: exit 2."""
    assert run(*args).exit_code == 2


def test_debug_shows_the_traceback(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--debug lets the error through (a traceback) instead of the one-line message."""
    scheduling_fake.unreachable = True
    result = CliRunner().invoke(cli.main, ["--debug", "submit", str(script)])
    assert result.exit_code != 0
    assert type(result.exception).__name__ == "SchedulerUnreachable"


def test_config_option_beats_the_env_var(env: Path, tmp_path: Path) -> None:
    """--config (before or after the command) wins over FELLOWS_FSM_CONFIG."""
    other = tmp_path / "other.toml"
    other.write_text((env / "fellows.toml").read_text().replace("park_cap_seconds = 0.3", "park_cap_seconds = 77"))
    for args in (("--config", str(other), "config", "check"), ("config", "check", "--config", str(other))):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "1m 17s" in result.stdout


def test_python_dash_m_runs_the_same_cli() -> None:
    """`python -m fellows_fsm --help` lists the commands."""
    out = subprocess.run(
        [sys.executable, "-m", "fellows_fsm", "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    for command in ("submit", "watch", "status", "history", "ladder", "diagram", "cancel", "config", "demo"):
        assert command in out
