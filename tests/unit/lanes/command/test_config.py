"""The lanes' tables (lanes/command/config.py): a lane command is an argv list whose placeholders exist."""

from __future__ import annotations

import pytest

from fellows_fsm import ConfigError
from fellows_fsm.lanes.command.config import CommandSettings


def test_lane_command_with_unknown_placeholder_is_refused() -> None:
    """A lane command naming a placeholder that does not exist is refused, naming it and the known ones."""
    with pytest.raises(ConfigError, match=r"\[lanes.gcp\] command uses placeholder \{jobid\}.*\{dispatch_id\}"):
        CommandSettings(name="gcp", command=("sky", "launch", "{jobid}"))


def test_lane_command_given_as_a_shell_string_is_refused() -> None:
    """A lane command must be an argv list; a shell string is refused with an example."""
    with pytest.raises(ConfigError, match=r"must be a non-empty list of arguments \(argv, never a shell string\)"):
        CommandSettings(name="gcp", command="gcloud batch jobs submit x")  # type: ignore[arg-type]


def test_a_logs_template_is_checked_as_status_is() -> None:
    """`logs` takes the placeholders status takes; a user's value or an unknown one is refused naming the key."""
    lane = CommandSettings(name="sky", command=("true",), logs=("sky", "logs", "fsm-{dispatch_id}"))
    assert lane.logs == ("sky", "logs", "fsm-{dispatch_id}")
    with pytest.raises(ConfigError, match=r"\[lanes.sky\] logs uses placeholder \{job_name\}.*\$FSM_JOB_NAME"):
        CommandSettings(name="sky", command=("true",), logs=("sky", "logs", "{job_name}"))
    with pytest.raises(ConfigError, match=r"\[lanes.sky\] logs uses placeholder \{log\}, which is not known"):
        CommandSettings(name="sky", command=("true",), logs=("sky", "logs", "{log}"))
    with pytest.raises(ConfigError, match=r"logs='sky logs' must be a non-empty list"):
        CommandSettings.from_table("sky", {"command": ["true"], "logs": "sky logs"})
