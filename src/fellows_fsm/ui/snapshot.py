"""One dispatch as a user sees it: a Snapshot read from a live Dispatch or a journal row, the state in words,
and the JSON object of ``status --json``.

Values only: nothing here renders a table or prints.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import attrs

from fellows_fsm.clock import iso_utc
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.vocab import FELLOWS, State
from fellows_fsm.journal.queries import restore
from fellows_fsm.journal.schema import DispatchRow, HandoffRow
from fellows_fsm.journal.store import Journal

__all__ = [
    "Listed",
    "Snapshot",
    "dispatch_json",
    "journaled",
    "left_ladder",
    "shown_state",
    "state_style",
    "status_words",
]


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


@attrs.frozen
class Snapshot:
    """What the live view shows of one dispatch at one moment."""

    dispatch_id: str
    name: str
    gpus: int
    time_limit_seconds: int | None
    label: str
    lane: str
    qos: str | None
    job_id: str | None
    job_state: str | None
    """SLURM's own state word from the latest observation (PENDING, RUNNING, ...)."""
    reason: str | None
    rung_index: int
    ladder: tuple[str, ...]
    deadline: float | None
    """When the current rung's window closes; None when pinned, final or not on the ladder."""
    worst_case: float | None
    """When the dispatch is handed on at the latest (the current deadline plus every later cap)."""
    final: bool
    outcome: str = ""
    pinned: bool = False

    @classmethod
    def of_dispatch(cls, d: Dispatch, *, lane: str = FELLOWS) -> Snapshot:
        """Read (never drive) a live Dispatch."""
        obs = d.look
        walking = not d.pinned and not d.is_final
        later = math.fsum(r.park_cap_seconds for r in d.ladder.rungs[d.rung_index + 1 :])
        return cls(
            dispatch_id=d.id,
            name=d.spec.name,
            gpus=d.spec.gpus,
            time_limit_seconds=d.spec.time_limit_seconds,
            label=d.label,
            lane=lane,
            qos=d.rung.qos,
            job_id=d.job_id,
            job_state=obs.state if obs is not None else None,
            reason=obs.reason if obs is not None else None,
            rung_index=d.rung_index,
            ladder=d.ladder.qos_names,
            deadline=d.deadline if walking else None,
            worst_case=d.deadline + later if walking else None,
            final=d.is_final,
            pinned=d.pinned,
        )

    @classmethod
    def of_row(cls, row: DispatchRow, handoff: HandoffRow | None = None) -> Snapshot:
        """A dispatch as the journal has it (no live observation, no deadlines)."""
        ladder = tuple(str(r["qos"]) for r in row.ladder)
        rung_index = ladder.index(row.qos) if row.qos in ladder else 0
        return cls(
            dispatch_id=row.id,
            name=str(row.spec.get("name", "")),
            gpus=int(row.spec.get("gpus", 0)),
            time_limit_seconds=row.spec.get("time_limit_seconds"),
            label=row.label,
            lane=handoff.lane if handoff is not None else row.lane,
            qos=row.qos,
            job_id=row.job_id,
            job_state=None,
            reason=None,
            rung_index=rung_index,
            ladder=ladder,
            deadline=None,
            worst_case=None,
            final=row.final,
            outcome=row.outcome,
            pinned=row.pinned,
        )


def journaled(journal: Journal, row: DispatchRow, handoff: HandoffRow | None = None) -> Snapshot:
    """A dispatch as the journal has it, with its countdowns: a live ladder dispatch is rebuilt from its steps
    (the window's deadline is data the journal gives, not memory of the process that drives it)."""
    if row.final or row.lane != FELLOWS or handoff is not None or not row.ladder:
        return Snapshot.of_row(row, handoff)
    d = restore(journal, row)
    if not d.history:
        return Snapshot.of_row(row, handoff)
    return attrs.evolve(Snapshot.of_dispatch(d), reason=d.history[-1].reason, outcome=row.outcome)


def dispatch_json(row: DispatchRow, handoff: HandoffRow | None = None) -> dict[str, Any]:
    """One dispatch as a JSON object: ``dispatch_id``, ``state``, ``lane``, ``qos``, ``slurm_job_id`` and more."""
    return {
        "dispatch_id": row.id,
        "name": row.spec.get("name"),
        "state": row.label,
        "lane": handoff.lane if handoff is not None else row.lane,
        "qos": row.qos,
        "slurm_job_id": row.job_id,
        "final": row.final,
        "outcome": row.outcome,
        "intent": row.intent,
        "pinned": row.pinned,
        "gpus": row.spec.get("gpus"),
        "created_at": iso_utc(row.created_at),
        "updated_at": iso_utc(row.updated_at),
        "handoff_exit_status": handoff.exit_status if handoff is not None else None,
    }


def shown_state(snap: Listed) -> str:
    """The state as a user reads it: the journal's, as the last step left it (``HANDED_OFF``, ``REFUSED``, ...);
    every state a dispatch reaches is a row of the table, so nothing is rebuilt from the outcome."""
    return snap.label


_PAST_LADDER = frozenset(
    {
        State.FAILED_TO_GCP,
        State.HANDING_OFF,
        State.HANDED_OFF,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.NO_LANE_LEFT,
        State.REFUSED,
    }
)


def left_ladder(snap: Snapshot) -> bool:
    """True once the dispatch is past every rung: handed (or being handed) to another lane, or refused."""
    return snap.label in _PAST_LADDER or snap.lane != FELLOWS


def state_style(label: str) -> str:
    """The rich style a shown state is drawn in: green once it runs, yellow once it left the ladder, else cyan."""
    if label in (State.RUNNING, State.HANDED_OFF):
        return "bold green"
    if label in (
        State.FAILED_TO_GCP,
        State.HANDOFF_FAILED,
        State.HANDOFF_UNKNOWN,
        State.WITHDRAWN,
        State.REFUSED,
        State.NO_LANE_LEFT,
        State.HANDING_OFF,
    ):
        return "bold yellow"
    return "bold cyan"


def status_words(snap: Listed) -> str:
    """The state column of ``status``: the shown state with where it is, e.g. ``RUNNING(normal-eur)``."""
    state = shown_state(snap)
    if state == State.RUNNING and snap.qos:
        return f"{State.RUNNING}({snap.qos})"
    if (
        state in (State.HANDED_OFF, State.HANDOFF_FAILED, State.HANDOFF_UNKNOWN, State.HANDING_OFF)
        and snap.lane != FELLOWS
    ):
        return f"{state}({snap.lane})"
    return state
