"""The command lane (lanes/command.py): every value of the job reaches its command in the environment (``FSM_*``).

The values it refuses in an argv are the lanes' tables' (test_cli_hostile.py, config/test_lanes.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.unit.cli_helpers import SchedulingFake, _toml, run


def test_the_lane_gets_every_value_in_its_environment(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """The command's environment carries the dispatch id, name, script, workdir, GPUs and time limits."""
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
        "FSM_SCRIPT": str(script.resolve()),
        "FSM_WORKDIR": str(script.resolve().parent),
        "FSM_GPUS": "8",
        "FSM_TIME_LIMIT_SECONDS": "3600",
        "FSM_TIME_LIMIT_MINUTES": "60",
    }
