"""What a pip user meets in the first hour besides init (issue 41): "did you mean" for a mistyped config key, table,
lane or command, and a library that never prints its warnings on the stderr of a program that embeds it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fellows_fsm.config.file import Config, load_config
from fellows_fsm.errors import ConfigError
from tests.unit.cli_helpers import SchedulingFake, run


@pytest.mark.parametrize(
    ("toml", "guess"),
    [
        ("[fellows]\npark_cap_second = 5\n", "did you mean 'park_cap_seconds'?"),
        ("[budgett]\n", "did you mean 'budget'?"),
        ("[budget]\npaid_gpu_hours_per_dy = 5\n", "did you mean 'paid_gpu_hours_per_day'?"),
        ("[router]\norder = ['fellows', 'gcp']\n[lanes.gcp]\ncomand = ['true']\n", "did you mean 'command'?"),
    ],
    ids=["fellows-key", "table", "budget-key", "lane-key"],
)
def test_a_mistyped_key_names_the_closest_known_one(tmp_path: Path, toml: str, guess: str) -> None:
    """A config key or table one typo away from a known one is refused naming the one meant."""
    path = tmp_path / "fellows.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=guess):
        load_config(path)


def test_an_unknown_lane_names_the_closest() -> None:
    """Asking for a lane one typo away from a configured one names it."""
    config = Config.from_mapping({"lanes": {"gcp": {"command": ["true"]}}})
    with pytest.raises(ConfigError, match=r"lane 'gpc' is not configured \(did you mean 'gcp'\?\)"):
        config.lane("gpc")


def test_a_mistyped_command_names_the_closest() -> None:
    """An unknown command exits 2 with one line naming the command meant."""
    result = run("stauts")
    assert result.exit_code == 2
    assert "Did you mean 'status'?" in result.stderr


def test_the_library_prints_nothing_where_its_embedder_configured_no_logging() -> None:
    """A warning of the library reaches no stderr of a program that configured no logging (a NullHandler on
    'fellows_fsm'), and the library's records go to its own loggers, never the root logger."""
    code = (
        "import logging, fellows_fsm.driver.router as r\n"
        "r.log.warning('no tick since then')\n"
        "assert r.log.name == 'fellows_fsm.driver.router'\n"
        "assert not logging.getLogger().handlers\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str) -> None:
    """completion SHELL prints click's completion script for fellows-fsm in that shell."""
    result = run("completion", shell)
    assert result.exit_code == 0, result.output
    assert "_FELLOWS_FSM_COMPLETE" in result.stdout
    assert f"{shell}_complete" in result.stdout


def test_the_completion_script_completes_a_command() -> None:
    """The script's callback completes 'sta' to status (as the shell would ask it)."""
    from click.testing import CliRunner  # noqa: PLC0415 - only this test drives the completion protocol

    from fellows_fsm import cli  # noqa: PLC0415

    env = {"_FELLOWS_FSM_COMPLETE": "bash_complete", "COMP_WORDS": "fellows-fsm sta", "COMP_CWORD": "1"}
    result = CliRunner().invoke(cli.main, [], env=env, prog_name="fellows-fsm")
    assert "plain,status" in result.output.split()


def test_spend_and_config_check_name_the_budget_currency(tmp_path: Path) -> None:
    """[budget] currency is shown beside every cost by spend (its column and limit line, and in --json) and by
    config check; a currency with a space is refused naming the key."""
    config = tmp_path / "fellows.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n[router]\norder = ["fellows", "gcp"]\n[lanes.gcp]\ncommand = ["true"]\n'
        'price_per_gpu_hour = 2.5\n[budget]\npaid_cost_per_month = 2000\ncurrency = "EUR"\n'
    )
    spend = run("--config", str(config), "spend")
    assert spend.exit_code == 0, spend.output
    assert "cost (EUR)" in spend.stdout
    assert "paid_cost_per_month = 2000.00 EUR: 0.00 EUR counted this month" in spend.stdout
    assert '"currency": "EUR"' in run("--config", str(config), "spend", "--json").stdout
    assert "2000 EUR a month" in run("--config", str(config), "config", "check").stdout
    with pytest.raises(ConfigError, match=r"\[budget\] currency='US dollar'"):
        Config.from_mapping({"budget": {"currency": "US dollar"}})


def test_submit_wrap_dispatches_the_command_as_a_one_line_sh_script(env: Path, scheduling_fake: SchedulingFake) -> None:
    """submit --wrap "CMD" -- OPTS dispatches a sh script running CMD (job name 'wrap', as sbatch's), its sbatch
    options kept; SCRIPT and --wrap together, or neither, exit 2 with nothing journaled."""
    scheduling_fake.scheduling = False
    result = run("submit", "--detach", "--gpus", "8", "--wrap", "python train.py --lr 3e-4", "--", "--mem=64G")
    assert result.exit_code == 0, result.output
    [row] = json.loads(run("status", result.stdout.strip(), "--json").stdout)
    assert row["name"] == "wrap"
    [job] = scheduling_fake.jobs.values()
    assert "--mem=64G" in job.spec.extra_args
    assert Path(job.spec.script_file).read_text().endswith("\npython train.py --lr 3e-4\n")
    both = run("submit", "--wrap", "true", str(env / "train.sbatch"))
    neither = run("submit")
    assert (both.exit_code, neither.exit_code) == (2, 2)
    assert "either SCRIPT" in both.stderr
    assert "--wrap" in neither.stderr
    assert len(json.loads(run("status", "--json").stdout)) == 1
