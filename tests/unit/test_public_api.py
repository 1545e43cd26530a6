"""The package's public names: exactly the intended ones, each importable from fellows_fsm."""

from __future__ import annotations

import importlib

import pytest

import fellows_fsm

PUBLIC = {
    # the embedding API (docs/python-api.md)
    "Fellows",
    "Check",
    "Submitted",
    "Progress",
    "Handle",
    "HistoryEntry",
    "TickReport",
    "Config",
    "FellowsConfig",
    "LaneConfig",
    "Ladder",
    "Rung",
    "load_config",
    "JobSpec",
    # the port, its values and its fake (for users' own tests)
    "Scheduler",
    "FakeScheduler",
    "Observation",
    "Phase",
    "ReasonGroup",
    "classify_reason",
    "Clock",
    "SystemClock",
    # the lifecycle core (sans I/O) and the driver that runs its effects
    "Dispatch",
    "Decision",
    "Executor",
    "Recorder",
    "Step",
    "CANCELLED",
    "FAILED_TO_GCP",
    "PARKED",
    "RUNNING",
    "WITHDRAWN",
    # the error tree
    "FellowsError",
    "UsageError",
    "ConfigError",
    "TransitionNotAllowed",
    "SchedulerError",
    "SchedulerUnreachable",
    "SshLoginRefused",
    "SubmitRejected",
    "QosRejected",
    "JournalError",
    "JournalBusy",
    "LaneError",
    "Interrupted",
}


def test_all_lists_exactly_the_public_names() -> None:
    """fellows_fsm.__all__ is the intended public surface, no more and no less, without duplicates."""
    assert len(fellows_fsm.__all__) == len(set(fellows_fsm.__all__))
    assert set(fellows_fsm.__all__) == PUBLIC


def test_all_is_sorted() -> None:
    """__all__ is kept sorted (constants first, as ruff sorts it), so a diff shows an added name plainly."""
    assert fellows_fsm.__all__ == sorted(fellows_fsm.__all__, key=lambda n: (not n.isupper(), n))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_importable(name: str) -> None:
    """``from fellows_fsm import <name>`` works for every public name, and it is not None."""
    module = importlib.import_module("fellows_fsm")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from fellows_fsm import {name}", namespace)  # the very statement a user writes
    assert namespace[name] is getattr(module, name)
