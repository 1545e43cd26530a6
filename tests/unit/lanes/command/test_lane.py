"""The command lane (lanes/command/lane.py): every value of the job reaches its command in the environment (``FSM_*``).

The values it refuses in an argv are the lanes' tables' (test_cli_hostile.py, config/test_lanes.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fellows_fsm import ConfigError, JobSpec
from fellows_fsm.lanes.base import HandoffLane
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.command.lane import COMMAND
from tests.unit.cli_helpers import SchedulingFake, _toml, run


def test_the_lane_gets_every_value_in_its_environment(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """The command's environment carries the dispatch id, name, script (the copy kept at submit), workdir (the
    script's own directory), GPUs and time limits."""
    out = env / "env.json"
    values = "{k: v for k, v in os.environ.items() if k.startswith('FSM_')}"
    code = f"import json, os; json.dump({values}, open('{out}', 'w'))"
    command = json.dumps([sys.executable, "-c", code.replace("{", "{{").replace("}", "}}"), "{dispatch_id}"])
    (env / "fellows.toml").write_text(_toml(env, gcp=command))
    result = run("submit", "--pin", "gcp", "--json", "--name", "train", str(script))
    assert result.exit_code == 0, result.output
    dispatch_id = json.loads(result.stdout)["dispatch_id"]
    assert json.loads(out.read_text()) == {
        "FSM_DISPATCH_ID": dispatch_id,
        "FSM_JOB_NAME": "train",
        "FSM_SCRIPT": str(env / "state" / "scripts" / dispatch_id / script.name),
        "FSM_WORKDIR": str(script.resolve().parent),
        "FSM_GPUS": "8",
        "FSM_TIME_LIMIT_SECONDS": "3600",
        "FSM_TIME_LIMIT_MINUTES": "60",
    }


def test_the_command_kind_parses_its_table_and_builds_a_command_lane(tmp_path: Path) -> None:
    """The command kind reads its own table (argv lists become tuples), gives it back as the journal keeps it,
    and builds a lane a job is handed to, never one that walks a ladder."""
    table = {"command": ["gcloud", "{dispatch_id}"], "probe": ["true"], "timeout_seconds": 30}
    settings = COMMAND.parse("gcp", table)
    assert settings == CommandSettings(
        name="gcp", command=("gcloud", "{dispatch_id}"), probe=("true",), timeout_seconds=30
    )
    assert COMMAND.parse("gcp", COMMAND.table(settings)) == settings
    lane = COMMAND.build(settings, state_dir=tmp_path)
    assert isinstance(lane, HandoffLane)
    assert (lane.name, lane.kind, lane.walks_ladder, lane.settings) == ("gcp", "command", False, settings)
    assert lane.command("abc123", JobSpec(name="t", script="t.sbatch")) == ("gcloud", "abc123")


def test_a_command_table_with_an_unknown_key_names_the_lane_and_the_key() -> None:
    """A key the command kind does not know is refused in one line naming the lane, the key and the known keys."""
    known = r"known keys are cancel, command, kind, "
    with pytest.raises(ConfigError, match=r"^\[lanes\.gcp\]: unknown key 'qos'; " + known):
        COMMAND.parse("gcp", {"command": ["gcloud"], "qos": "high-eur"})
