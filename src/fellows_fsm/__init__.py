"""fellows_fsm: dispatch GPU batch jobs to a shared SLURM cluster, walking its QoS ladder before GCP.

The Python API (docs/python-api.md): ``Fellows(load_config()).submit(JobSpec(...))``, then ``follow``.
"""

from __future__ import annotations

import logging

from fellows_fsm.api import Fellows, Submitted
from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config.file import Config, load_config
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import Decision, Step
from fellows_fsm.core.ladder import Ladder, Rung
from fellows_fsm.core.vocab import State
from fellows_fsm.driver.admission import Check
from fellows_fsm.driver.executor import Executor, Recorder
from fellows_fsm.driver.reports import Handle, Progress, TickReport
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    Interrupted,
    JournalBusy,
    JournalError,
    LaneError,
    QosRejected,
    SchedulerError,
    SchedulerUnreachable,
    SshLoginRefused,
    SubmitRejected,
    TransitionNotAllowed,
    UsageError,
)
from fellows_fsm.journal.history import HistoryEntry
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec, Observation, Phase, ReasonGroup, Scheduler, classify_reason

CANCELLED, FAILED_TO_GCP, PARKED, RUNNING, WITHDRAWN = (
    State.CANCELLED,
    State.FAILED_TO_GCP,
    State.PARKED,
    State.RUNNING,
    State.WITHDRAWN,
)
"""The states a program compares a handle against (``handle.state == RUNNING``): members of ``core.vocab.State``."""

__all__ = [
    "CANCELLED",
    "FAILED_TO_GCP",
    "PARKED",
    "RUNNING",
    "WITHDRAWN",
    "Check",
    "Clock",
    "CommandSettings",
    "Config",
    "ConfigError",
    "Decision",
    "Dispatch",
    "Executor",
    "FakeScheduler",
    "Fellows",
    "FellowsConfig",
    "FellowsError",
    "Handle",
    "HistoryEntry",
    "Interrupted",
    "JobSpec",
    "JournalBusy",
    "JournalError",
    "Ladder",
    "LaneConfig",
    "LaneError",
    "Observation",
    "Phase",
    "Progress",
    "QosRejected",
    "ReasonGroup",
    "Recorder",
    "Rung",
    "Scheduler",
    "SchedulerError",
    "SchedulerUnreachable",
    "SlurmSettings",
    "SshLoginRefused",
    "Step",
    "SubmitRejected",
    "Submitted",
    "SystemClock",
    "TickReport",
    "TransitionNotAllowed",
    "UsageError",
    "classify_reason",
    "load_config",
]

FellowsConfig = SlurmSettings
"""The slurm kind's table under its name before issue 37 (kept for programs written against it)."""
LaneConfig = CommandSettings
"""The command kind's table under its name before issue 37 (kept for programs written against it)."""

# A library logs to its own logger and never decides what reaches a terminal: without this, Python's last-resort
# handler would print the library's warnings on the stderr of a program that embeds it and configured no logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())
