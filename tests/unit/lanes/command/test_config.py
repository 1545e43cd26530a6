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
