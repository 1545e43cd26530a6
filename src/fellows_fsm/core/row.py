"""The shape of a row of the one table (lifecycle.py assembles it): a trigger, a source, a destination, its guards
and what the step keeps; and the words a row's source or destination may use besides a state's name. Nothing here
decides anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from fellows_fsm.core.vocab import Trigger

if TYPE_CHECKING:
    from fellows_fsm.core.dispatch import Dispatch

__all__ = ["INITIAL", "LIVE", "NEXT_RUNG", "PAID", "RUNG", "SAME", "Guard", "Row"]

RUNG = "ANY_RUNG"
"""In a row's source: every rung state (SUBMITTED(<first>), RESUBMITTED(<later>))."""
NEXT_RUNG = "NEXT_RUNG"
"""In a row's destination: the rung after the one being left (one transition per rung, guarded left_<qos>)."""
SAME = "SAME"
"""In a row's destination: stay in the state (a step that is journaled but moves nowhere)."""
LIVE = "ANY_LIVE"
"""In a row's source: every state of a dispatch on the ladder or past it, except a command lane's handoff."""
PAID = "ANY_PAID"
"""In a row's source: every state of a paid job its lane has, or may have (``PAID_LIVE_STATES``)."""
INITIAL = ""
"""In a row's source: none (the dispatch's first step: ``submit`` onto the ladder, or ``pin`` to a command lane)."""

Guard = Callable[["Dispatch"], bool]


class Row(NamedTuple):
    """One row of the table: ``trigger`` takes a dispatch from ``source`` to ``dest`` when every guard holds."""

    trigger: Trigger
    source: str
    dest: str
    guards: tuple[Guard, ...] = ()
    note: Callable[[Dispatch], str] | None = None
    """The step's note (why it is taken), computed before it is journaled."""
    keep: Callable[[Dispatch], None] | None = None
    """The step's bookkeeping, run after it is journaled (and again when the journal is replayed)."""
    told: bool = False
    """Fired by an event, never asked on a look."""
    outcome: str = ""
    """The outcome a final step ends the dispatch with (the journal's outcome column)."""
    command: str = ""
    """A lane command's step: the command's state it leaves (the journal's handoffs ``status``), written with it."""
    paid: str = ""
    """A paid run's step: the run's status it leaves (the journal's paid_runs ``status``), written with it."""
