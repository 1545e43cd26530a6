"""The lifecycle core, sans I/O: the transition table (lifecycle.py), the Dispatch model and the effects it asks for.

Nothing here calls the cluster, the journal, a subprocess or the terminal (tests/unit/core/test_core.py checks every
import); the driver (driver.py) runs the effects. The model is h11 and wsproto.
"""

from __future__ import annotations

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import (
    Attach,
    CancelIfPending,
    CancelJobs,
    Decision,
    Effect,
    FindByToken,
    HandOff,
    MoveQos,
    Record,
    Step,
    Submit,
)
from fellows_fsm.core.ladder import Ladder, Rung, dispatch_token, state_label
from fellows_fsm.core.lifecycle import EARLY_PARK, TABLE, TRIGGERS, window_deadline
from fellows_fsm.core.looks import LOST_AFTER_SECONDS
from fellows_fsm.core.machine import build_machine, machine_definition
from fellows_fsm.core.row import Row

__all__ = [
    "EARLY_PARK",
    "LOST_AFTER_SECONDS",
    "TABLE",
    "TRIGGERS",
    "Attach",
    "CancelIfPending",
    "CancelJobs",
    "Decision",
    "Dispatch",
    "Effect",
    "FindByToken",
    "HandOff",
    "Ladder",
    "MoveQos",
    "Record",
    "Row",
    "Rung",
    "Step",
    "Submit",
    "build_machine",
    "dispatch_token",
    "machine_definition",
    "state_label",
    "window_deadline",
]
