"""A dispatch's history as entries: its journaled transitions, oldest first (for a journal written before a lane
command's steps and a withdrawal were rows, its handoff and its withdrawal, as the state column says they ended).

The read model behind ``Fellows.history``, ``fellows-fsm history`` and a path drawn on the state diagram. It reads
rows the caller fetched (one dispatch's steps, jobs and handoff), never the whole journal, and never renders:
ui/history.py draws the table. (The cluster's history, for ``park_early = "calibrated"``, is history.py and
slurm/history.py.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from fellows_fsm.clock import iso_utc
from fellows_fsm.core.effects import Step
from fellows_fsm.core.ladder import Ladder, Rung, split_job_id, state_label
from fellows_fsm.core.vocab import HandoffStatus, Outcome, State, Trigger
from fellows_fsm.journal.schema import DispatchRow, HandoffRow, JobRow

__all__ = ["HistoryEntry", "budget_reason", "history_entries", "waits_for_budget"]

_LANE_ENDS = frozenset({State.HANDED_OFF, State.HANDOFF_FAILED, State.HANDOFF_UNKNOWN})


@attrs.frozen
class HistoryEntry:
    """One line of a dispatch's history: a journaled transition, its handoff, or its withdrawal."""

    at: float
    source: str | None
    """The state label left (None for the first submit)."""
    dest: str
    trigger: str
    qos: str | None
    slurm_job_id: str | None
    reason: str | None
    note: str = ""
    source_name: str | None = None
    """The state names (as in the machine), for drawing the path."""
    dest_name: str = ""
    cluster: str | None = None
    """The SLURM lane (cluster) of the step's rung, or None (a lane command's step)."""
    several_clusters: bool = False
    """Whether the dispatch's ladder walks more than one cluster (its JSON then names them)."""

    def as_json(self) -> dict[str, Any]:
        """The documented JSON keys: at, from, to, trigger, qos, slurm_job_id (as the journal keeps it:
        ``<id>@<cluster>`` off fellows), reason, note; on a ladder across several clusters also cluster and
        cluster_job_id (SLURM's own id on that cluster)."""
        where: dict[str, Any] = {}
        if self.several_clusters:
            bare = split_job_id(self.slurm_job_id)[1] if self.slurm_job_id else None
            where = {"cluster": self.cluster, "cluster_job_id": bare}
        return {
            "at": iso_utc(self.at),
            "from": self.source,
            "to": self.dest,
            "trigger": self.trigger,
            "qos": self.qos,
            **where,
            "slurm_job_id": self.slurm_job_id,
            "reason": self.reason,
            "note": self.note,
        }

    def detail(self) -> str:
        """The job, reason and note of the entry in one short line."""
        parts = []
        if self.slurm_job_id:
            parts.append(f"job {self.slurm_job_id}")
        if self.reason:
            parts.append(self.reason)
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def _ladder_of(row: DispatchRow) -> Ladder | None:
    return Ladder(tuple(Rung(**r) for r in row.ladder)) if row.ladder else None


def history_entries(
    row: DispatchRow, steps: Sequence[Step], jobs: Sequence[JobRow], handoff: HandoffRow | None
) -> list[HistoryEntry]:
    """Every transition of a dispatch, its handoff (if any) and its withdrawal (if any), oldest first."""
    ladder = _ladder_of(row)
    job_by_rung = {j.rung_index: j.job_id for j in jobs}
    several = ladder is not None and len(ladder.lanes) > 1

    def label(name: str) -> str:
        return state_label(ladder, name) if ladder is not None else name

    def cluster(step: Step) -> str | None:
        if ladder is None or not step.qos:  # a lane command's step (a pinned dispatch's has no QoS)
            return None
        if step.job_id:
            return split_job_id(step.job_id)[0]
        return ladder.rungs[step.rung_index].lane if 0 <= step.rung_index < len(ladder.rungs) else None

    entries = []
    for step in steps:
        job_id = step.job_id
        if job_id is None and step.trigger in ("submit", "resubmit"):
            job_id = job_by_rung.get(step.rung_index)  # the job id is journaled once sbatch answers
        entries.append(
            HistoryEntry(
                at=step.at,
                source=label(step.source) if step.source else None,
                dest=label(step.dest),
                trigger=step.trigger,
                qos=step.qos,
                slurm_job_id=job_id,
                reason=step.reason,
                note=step.note,
                source_name=step.source or None,
                dest_name=step.dest,
                cluster=cluster(attrs.evolve(step, job_id=job_id)),
                several_clusters=several,
            )
        )
    if handoff is not None and not any(s.trigger == "hand_off" for s in steps):
        # A handoff journaled without its steps (a journal written before a lane command's steps were rows: a
        # dispatch pinned straight to a lane, or older than the handoff's rows): shown from the handoffs table,
        # where the dispatch's state column (or, withdrawn since, its command's) says it went.
        dest = row.state if row.state in _LANE_ENDS else _command_end(handoff)
        status = "not finished" if dest == State.HANDING_OFF else f"exit {handoff.exit_status}"
        if dest == State.HANDOFF_UNKNOWN:
            status = "how it ended is unknown (check the lane; never run again)"
        last = ((handoff.stderr or "").strip().splitlines() or [""])[-1] if dest != State.HANDED_OFF else ""
        source: str | None = State.FAILED_TO_GCP if entries else None
        entries.append(
            HistoryEntry(
                at=handoff.finished_at or handoff.started_at,
                source=source,
                dest=dest,
                trigger="hand_off",
                qos=None,
                slurm_job_id=None,
                reason=None,
                note=f"{handoff.lane} command {handoff.argv[0]} ...: {status}" + (f": {last}" if last else ""),
                source_name=source,
                dest_name=dest if dest != State.HANDING_OFF else State.HANDOFF_FAILED,
            )
        )
    if row.state == State.WITHDRAWN and not (steps and steps[-1].dest == State.WITHDRAWN):
        # A withdrawal journaled without its step (a journal written before a withdrawal was a row): shown from
        # the dispatch row, its state column WITHDRAWN (the outcome says only who withdrew it).
        source = entries[-1].dest if entries else None
        entries.append(
            HistoryEntry(
                at=row.updated_at,
                source=source,
                dest=State.WITHDRAWN,
                trigger="withdraw",
                qos=row.qos,
                slurm_job_id=row.job_id,
                reason=None,
                note="fellows-fsm cancel" if row.outcome == "withdrawn" else "Ctrl-C while it was being queued",
                source_name=entries[-1].dest_name if entries else None,
                dest_name=State.WITHDRAWN,
                cluster=split_job_id(row.job_id)[0] if row.job_id else None,
                several_clusters=several,
            )
        )
    return entries


def _command_end(handoff: HandoffRow) -> str:
    """Where an old journal's handoff went, read from its command's state column (the handoffs ``status``): a
    dispatch withdrawn after its command failed keeps only WITHDRAWN in its own."""
    if handoff.status == HandoffStatus.STARTED:
        return State.HANDING_OFF
    return State.HANDOFF_FAILED if handoff.status == HandoffStatus.FAILED else State.HANDOFF_UNKNOWN


def waits_for_budget(outcome: str) -> bool:
    """Is a dispatch with this outcome waiting on its last free rung for the budget?"""
    return outcome == Outcome.BUDGET


def budget_reason(steps: Sequence[Step]) -> str | None:
    """Why the budget keeps a dispatch on its last free rung: its last ``budget_wait`` step's note (None: none)."""
    for step in reversed(steps):
        if step.trigger == Trigger.BUDGET_WAIT:
            return step.note or None
    return None
