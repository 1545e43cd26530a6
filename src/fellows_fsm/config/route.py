"""Where a request goes: the one answer to "which lane, which rungs, which paid lane after them" (``Config.route``).

A submit asks it once; the check before the first sbatch (driver/admission.py), the journal row (driver/inbox.py),
what the ``[budget]`` can never pay for (driver/budget.py) and the command line's follow-up all read the same
``Route``. The intent is checked here and nowhere else.
"""

from __future__ import annotations

import attrs

from fellows_fsm.core.ladder import Ladder
from fellows_fsm.errors import UsageError

__all__ = ["INTENTS", "Route", "check_intent"]

INTENTS = ("prod", "debug")


def check_intent(intent: object) -> str:
    """``intent`` if it is prod or debug, else UsageError (exit 2): the one check for the command line's
    ``--intent`` and the Python API's ``intent=``."""
    if intent not in INTENTS:
        raise UsageError(f"intent {intent!r} is not known; use 'prod' or 'debug' (--intent, or intent= in Python)")
    return str(intent)


@attrs.frozen
class Route:
    """Where one request goes, as the config says (nothing here has asked a cluster)."""

    intent: str
    """prod or debug (checked)."""
    pin: str | None
    """The lane the request is pinned to, as given (a configured one), or None to walk."""
    lane: str
    """The lane the dispatch is journaled under: the ladder lane (``[fellows]``), or the handoff lane it is pinned
    to."""
    ladder: Ladder | None
    """The rungs it may walk, first to last, before the cluster's grants are read (``--pin`` of a SLURM lane: that
    lane's ladder, of which only the first rung is used); None when it is pinned to a lane it is handed to."""
    walk: tuple[str, ...]
    """The SLURM lanes whose grants are checked before the first sbatch: every one of the walk, or the pinned one,
    or none."""
    paid: str | None
    """The lane the dispatch may be handed to: the one it is pinned to, else the first of ``[router] order`` that
    walks no ladder; None when a pinned dispatch stays on a SLURM lane or the order has no such lane."""
    fallback: str | None
    """The lane the driver hands it to once its rungs park out (journaled with it): ``paid`` unless pinned."""

    @property
    def pinned(self) -> bool:
        return self.pin is not None

    @property
    def hands_off(self) -> bool:
        """Pinned to a lane a job is handed to (its command, or its paid job, IS the submit): no rung at all."""
        return self.ladder is None
