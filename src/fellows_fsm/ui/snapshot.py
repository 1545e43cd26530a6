"""A dispatch's state as a user reads it: the words and style of its state (``status_words``, ``shown_state``), the
Protocol those words read (``Listed``). The Snapshot and the JSON object they are read from are the journal's
(journal/snapshot.py), the same for every view and every notification.

Values only: nothing here renders a table or prints.
"""

from __future__ import annotations

from typing import Protocol

from fellows_fsm.core.vocab import LADDER_LANE, State
from fellows_fsm.journal.snapshot import Snapshot, cluster_of

__all__ = ["Listed", "left_ladder", "shown_label", "shown_state", "state_style", "status_words"]


class Listed(Protocol):
    """What the status words read of a dispatch: a Snapshot has it, and so has the journal's lighter Listing."""

    @property
    def dispatch_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def final(self) -> bool: ...
    @property
    def outcome(self) -> str: ...
    @property
    def qos(self) -> str | None: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def lane(self) -> str: ...


def shown_state(snap: Listed) -> str:
    """The state as a user reads it: the journal's, as the last step left it (``HANDED_OFF``, ``REFUSED``, ...);
    every state a dispatch reaches is a row of the table, so nothing is rebuilt from the outcome. The seed's
    ``FAILED_TO_GCP`` reads ``FREE_LANES_DONE`` (``shown_label``): the paid lane next may be any lane."""
    return shown_label(snap.label)


SHOWN_LABELS: dict[str, str] = {State.FAILED_TO_GCP.value: "FREE_LANES_DONE"}
"""A state's name in the views where the table's would say what is not so: the seed's ``FAILED_TO_GCP`` keeps its
name in the table, the diagram and every ``--json``, but the lane after the free ones may be named anything."""


def shown_label(label: str) -> str:
    """The words a view shows for a state label (``FAILED_TO_GCP`` reads ``FREE_LANES_DONE``, the rest as they are)."""
    return SHOWN_LABELS.get(label, label)


_PAST_LADDER = frozenset(
    {
        State.FAILED_TO_GCP,
        State.HANDING_OFF,
        State.HANDED_OFF,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.NO_LANE_LEFT,
        State.REFUSED,
        State.PAID_QUEUED,
        State.PAID_RUNNING,
        State.PAID_UNKNOWN,
        State.PAID_DONE,
        State.PAID_FAILED,
        State.NO_BUDGET,
    }
)
_LANE_WORDS = frozenset(
    {
        State.HANDED_OFF,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.HANDING_OFF,
        State.PAID_QUEUED,
        State.PAID_RUNNING,
        State.PAID_UNKNOWN,
        State.PAID_DONE,
        State.PAID_FAILED,
    }
)
"""The states whose words name the lane the dispatch was handed to: ``PAID_RUNNING(gcp)``."""


def left_ladder(snap: Snapshot) -> bool:
    """True once the dispatch is past every rung: handed (or being handed) to another lane, or refused."""
    return snap.label in _PAST_LADDER or snap.lane not in snap.clusters  # handed on, or pinned to a command lane


def state_style(label: str) -> str:
    """The rich style a shown state is drawn in: green once it runs, yellow once it left the ladder, else cyan."""
    if label in (State.RUNNING, State.HANDED_OFF, State.PAID_DONE, State.ENDED):
        return "bold green"
    if label in (
        State.FAILED_TO_GCP,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.WITHDRAWN,
        State.REFUSED,
        State.NO_LANE_LEFT,
        State.HANDING_OFF,
        State.PAID_FAILED,
        State.NO_BUDGET,
    ):
        return "bold yellow"
    return "bold cyan"


def status_words(snap: Listed) -> str:
    """The state column of ``status``: the shown state with where it is, e.g. ``RUNNING(normal-eur)``."""
    state = shown_state(snap)
    if state == State.ENDED and snap.outcome:
        return f"{State.ENDED}({snap.outcome})"  # its result (the journal's outcome of an end step)
    if state == State.RUNNING and snap.qos:
        cluster = cluster_of(snap.job_id)
        return f"{State.RUNNING}({snap.qos if cluster in (None, LADDER_LANE) else f'{snap.qos}@{cluster}'})"
    if state in _LANE_WORDS and snap.lane != LADDER_LANE:
        return f"{state}({snap.lane})"
    return state
