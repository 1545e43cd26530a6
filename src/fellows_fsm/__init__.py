"""fellows_fsm: dispatch GPU batch jobs to a shared SLURM cluster, walking its QoS ladder before GCP."""

from __future__ import annotations

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.config import FellowsConfig, Ladder, Rung
from fellows_fsm.core import Decision, Dispatch, Step
from fellows_fsm.core.vocab import CANCELLED, FAILED_TO_GCP, PARKED, RUNNING, WITHDRAWN
from fellows_fsm.driver import Driver, Recorder
from fellows_fsm.errors import (
    ConfigError,
    FellowsError,
    JournalError,
    LaneError,
    QosRejected,
    SchedulerError,
    SchedulerUnreachable,
    SubmitRejected,
    TransitionNotAllowed,
)
from fellows_fsm.fake import FakeScheduler
from fellows_fsm.scheduler import JobSpec, Observation, Phase, ReasonGroup, Scheduler, classify_reason

__all__ = [
    "CANCELLED",
    "FAILED_TO_GCP",
    "PARKED",
    "RUNNING",
    "WITHDRAWN",
    "Clock",
    "ConfigError",
    "Decision",
    "Dispatch",
    "Driver",
    "FakeScheduler",
    "FellowsConfig",
    "FellowsError",
    "JobSpec",
    "JournalError",
    "Ladder",
    "LaneError",
    "Observation",
    "Phase",
    "QosRejected",
    "ReasonGroup",
    "Recorder",
    "Rung",
    "Scheduler",
    "SchedulerError",
    "SchedulerUnreachable",
    "Step",
    "SubmitRejected",
    "SystemClock",
    "TransitionNotAllowed",
    "classify_reason",
]
