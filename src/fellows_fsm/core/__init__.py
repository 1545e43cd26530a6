"""The lifecycle core, sans I/O: the transition table, the Dispatch model and the effects it asks for.

Nothing here calls the cluster, the journal, a subprocess or the terminal (tests/unit/test_core_imports.py
checks every import); the driver (router.py) runs the effects. The model is h11 and wsproto.
"""

from __future__ import annotations

from fellows_fsm.core.dispatch import EARLY_PARK, LOST_AFTER_SECONDS, Dispatch
from fellows_fsm.core.effects import (
    Attach,
    CancelIfPending,
    Decision,
    Effect,
    FindByToken,
    HandOff,
    MoveQos,
    Record,
    Submit,
)
from fellows_fsm.core.ladder import Ladder, Rung, window_deadline
from fellows_fsm.core.machine import (
    TABLE,
    TRIGGERS,
    Step,
    build_machine,
    dispatch_token,
    machine_definition,
    state_label,
)

__all__ = [
    "EARLY_PARK",
    "LOST_AFTER_SECONDS",
    "TABLE",
    "TRIGGERS",
    "Attach",
    "CancelIfPending",
    "Decision",
    "Dispatch",
    "Effect",
    "FindByToken",
    "HandOff",
    "Ladder",
    "MoveQos",
    "Record",
    "Rung",
    "Step",
    "Submit",
    "build_machine",
    "dispatch_token",
    "machine_definition",
    "state_label",
    "window_deadline",
]
