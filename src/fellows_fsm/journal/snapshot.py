"""One dispatch as the journal has it, told the same way everywhere: a Snapshot (read from a live Dispatch or a
journal row) and the JSON object of ``status --json``, the API and every notification's envelope (notify/envelope.py).

Values only, read through the Journal's own queries: nothing here renders, prints or writes. The words a view shows
for a state are ui/snapshot.py's.
"""

from __future__ import annotations

import math
import time
from typing import Any

import attrs

from fellows_fsm.clock import iso_utc
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.ends import dispatch_result
from fellows_fsm.core.ladder import split_job_id
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import FOLLOWED_STATES, LADDER_LANE, PaidStatus, State
from fellows_fsm.journal.ends import JobEnded
from fellows_fsm.journal.history import budget_reason, waits_for_budget
from fellows_fsm.journal.queries import restore
from fellows_fsm.journal.schema import DispatchRow, HandoffRow
from fellows_fsm.journal.store import Journal

__all__ = ["Snapshot", "cluster_of", "dispatch_json", "journaled", "paid_facts", "paid_json", "shows_paid"]

_FOLLOWED = frozenset(
    {
        PaidStatus.QUEUED,
        PaidStatus.RUNNING,
        PaidStatus.SUCCEEDED,
        PaidStatus.CANCELLING,
        PaidStatus.CANCELLED,
        PaidStatus.GONE,
    }
)
"""A run in one of these was seen on its lane (followed)."""
_PAID_STATES = frozenset(
    {State.PAID_QUEUED, State.PAID_RUNNING, State.PAID_UNKNOWN, State.PAID_DONE, State.PAID_FAILED}
)


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
    rung_lanes: tuple[str, ...] = ()
    """The SLURM lane (cluster) of each rung of ``ladder``; empty: every rung is fellows'."""
    paid: PaidRun | None = None
    """Its paid run, once it was handed to a paid lane (its GPU-hours and cost)."""
    budget: str | None = None
    """Why the budget keeps it on its last free rung (its last budget_wait step's note), while it does."""

    @property
    def clusters(self) -> tuple[str, ...]:
        """The cluster of each rung of ``ladder``."""
        return self.rung_lanes or (LADDER_LANE,) * len(self.ladder)

    @property
    def cluster(self) -> str | None:
        """The cluster of its job (or, before it has one, of the rung in hand); None with no ladder."""
        if self.job_id is not None:
            return split_job_id(self.job_id)[0]
        lanes = self.clusters
        return lanes[self.rung_index] if 0 <= self.rung_index < len(lanes) else None

    @property
    def several_clusters(self) -> bool:
        """True when its ladder walks more than one cluster."""
        return len(set(self.clusters)) > 1

    def where(self, i: int) -> str:
        """Rung ``i`` as a user reads it: its QoS, and its cluster off fellows (``inst-high@inst``), as the rung's
        state label says it (core/ladder.py: ``Rung.where``)."""
        lane = self.clusters[i]
        return self.ladder[i] if lane == LADDER_LANE else f"{self.ladder[i]}@{lane}"

    @classmethod
    def of_dispatch(cls, d: Dispatch, *, lane: str | None = None) -> Snapshot:
        """Read (never drive) a live Dispatch (``lane``: the dispatch's, by default its ladder's first lane)."""
        obs = d.look
        walking = not d.pinned and not d.is_final and d.state not in FOLLOWED_STATES  # (a running job: no window)
        later = math.fsum(r.park_cap_seconds for r in d.ladder.rungs[d.rung_index + 1 :])
        return cls(
            dispatch_id=d.id,
            name=d.spec.name,
            gpus=d.spec.gpus,
            time_limit_seconds=d.spec.time_limit_seconds,
            label=d.label,
            lane=lane if lane is not None else d.ladder.first.lane,
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
            rung_lanes=tuple(r.lane for r in d.ladder.rungs),
        )

    @classmethod
    def of_row(
        cls,
        row: DispatchRow,
        handoff: HandoffRow | None = None,
        *,
        paid: PaidRun | None = None,
        budget: str | None = None,
    ) -> Snapshot:
        """A dispatch as the journal has it (no live observation, no deadlines); ``paid`` and ``budget`` as
        ``paid_facts`` reads them."""
        ladder = tuple(str(r["qos"]) for r in row.ladder)
        lanes = tuple(str(r.get("lane", LADDER_LANE)) for r in row.ladder)  # a journal older than clusters: fellows
        rung_index = _rung_of(row, ladder, lanes)
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
            rung_lanes=lanes,
            paid=paid,
            budget=budget,
        )


def _rung_of(row: DispatchRow, ladder: tuple[str, ...], lanes: tuple[str, ...]) -> int:
    """The rung a journal row stands on: the one its job's cluster has its QoS on (two clusters may name a QoS
    alike), else the first with its QoS, else 0."""
    if row.qos not in ladder:
        return 0
    cluster = split_job_id(row.job_id)[0] if row.job_id is not None else None
    for i, (qos, lane) in enumerate(zip(ladder, lanes, strict=True)):
        if qos == row.qos and cluster in (None, lane):
            return i
    return ladder.index(row.qos)


def cluster_of(job_id: str | None, label: str = "") -> str | None:
    """The cluster of a listed dispatch: its job's (``1000@inst``: inst; a bare id: fellows), else the one its
    state label names (``RESUBMITTED(inst-high@inst)``), else None (not queued anywhere yet, or no ladder)."""
    if job_id is not None:
        return split_job_id(job_id)[0]
    inside = label.partition("(")[2].rstrip(")")
    return inside.rpartition("@")[2] if "@" in inside else None


def paid_facts(journal: Journal, row: DispatchRow, handoff: HandoffRow | None) -> tuple[PaidRun | None, str | None]:
    """A dispatch's paid run as the views show it (only one handed off has one: ``shows_paid``) and
    why the budget keeps it on its last free rung (only one whose outcome says it waits for the budget): no read
    for any other dispatch."""
    paid = journal.paid_run(row.id) if handoff is not None else None
    if paid is not None and not shows_paid(paid, row.state):
        paid = None
    budget = budget_reason(journal.steps(row.id)) if waits_for_budget(row.outcome) else None
    return paid, budget


def journaled(journal: Journal, row: DispatchRow, handoff: HandoffRow | None = None) -> Snapshot:
    """A dispatch as the journal has it, with its countdowns: a live ladder dispatch is rebuilt from its steps
    (the window's deadline is data the journal gives, not memory of the process that drives it); its paid run and
    its budget reason, if any."""
    paid, budget = paid_facts(journal, row, handoff)
    if row.final or handoff is not None or not row.ladder:  # a dispatch pinned to a command lane has no ladder
        return Snapshot.of_row(row, handoff, paid=paid, budget=budget)
    d = restore(journal, row)
    if not d.history:
        return Snapshot.of_row(row, handoff, paid=paid, budget=budget)
    return attrs.evolve(Snapshot.of_dispatch(d), reason=d.history[-1].reason, outcome=row.outcome, budget=budget)


def dispatch_json(
    row: DispatchRow,
    handoff: HandoffRow | None = None,
    *,
    paid: PaidRun | None = None,
    budget: str | None = None,
    now: float | None = None,
    end: JobEnded | None = None,
) -> dict[str, Any]:
    """One dispatch as a JSON object: ``dispatch_id``, ``state``, ``lane``, ``qos``, ``slurm_job_id`` (as the journal
    keeps it: ``<id>@<cluster>`` off fellows) and more; when its ladder walks several clusters also ``cluster`` (the
    SLURM lane of its job, or of the rung in hand) and ``cluster_job_id`` (SLURM's own id on that cluster); with a
    paid run a ``paid`` object (``paid_json``, its GPU-hours and cost as of ``now``, default the
    wall clock), while the budget keeps it on its last free rung ``budget_reason``. Any other dispatch's object
    has neither key. ``result`` (core/ends.py: one word on every lane) and ``exit_code`` are null until its job
    ended (``end``: the journal's ends row); then ``ended_at``, ``elapsed_seconds`` and ``gpu_hours`` say when and
    how long (a free job's)."""
    word = dispatch_result(row.state, row.outcome, final=row.final, ended=end.result if end is not None else None)
    snap = Snapshot.of_row(row, handoff)
    where: dict[str, Any] = {}
    if snap.several_clusters:
        bare = split_job_id(row.job_id)[1] if row.job_id is not None else None
        where = {"cluster": snap.cluster, "cluster_job_id": bare}
    return {
        "dispatch_id": row.id,
        "name": row.spec.get("name"),
        "state": row.label,
        "lane": handoff.lane if handoff is not None else row.lane,
        "qos": row.qos,
        **where,
        "slurm_job_id": row.job_id,
        "final": row.final,
        "result": word,
        "exit_code": end.exit_code if end is not None else None,
        **(_end_json(end) if end is not None else {}),
        "outcome": row.outcome,
        "intent": row.intent,
        "pinned": row.pinned,
        "gpus": row.spec.get("gpus"),
        "created_at": iso_utc(row.created_at),
        "updated_at": iso_utc(row.updated_at),
        "handoff_exit_status": handoff.exit_status if handoff is not None else None,
        **({"paid": paid_json(paid, time.time() if now is None else now)} if paid is not None else {}),
        **({"budget_reason": budget} if budget is not None else {}),
    }


def _end_json(end: JobEnded) -> dict[str, Any]:
    return {"ended_at": iso_utc(end.ended_at), "elapsed_seconds": end.elapsed_seconds, "gpu_hours": end.gpu_hours}


def shows_paid(run: PaidRun, state: str) -> bool:
    """Do the views show this run (a dispatch in ``state``): one its lane followed, or one with a price. A handoff
    to a lane with neither (a command lane as before issue 27: no ``status``, no ``price_per_gpu_hour``) shows as
    it always did: nothing is known of its run but the command's exit."""
    return run.price_per_gpu_hour is not None or run.status in _FOLLOWED or state in _PAID_STATES


def _finite(value: float | None) -> float | None:
    """A number JSON can carry: no bound (inf) is null."""
    return None if value is None or math.isinf(value) else value


def paid_json(run: PaidRun, now: float) -> dict[str, Any]:
    """The ``paid`` object of a dispatch's JSON: ``lane``, ``status`` (the paid_runs status: queued, running,
    succeeded, failed, cancelled, ...), ``gpu_hours`` and ``cost`` so far (cost null: the lane has no price),
    ``bound_gpu_hours`` and ``bound_cost`` (GPUs times its time limit; null: no limit, or no price),
    ``price_per_gpu_hour``, ``running_at`` and ``ended_at`` (null: not seen running, not ended). A run its lane
    cannot follow (status ``unfollowed``) has null ``gpu_hours`` and ``cost``: how long it ran is never known."""
    known = run.status != PaidStatus.UNFOLLOWED
    return {
        "lane": run.lane,
        "status": run.status,
        "gpu_hours": run.gpu_hours(now) if known else None,
        "cost": run.cost(now) if known else None,
        "bound_gpu_hours": _finite(run.bound_gpu_hours),
        "bound_cost": _finite(run.bound_cost),
        "price_per_gpu_hour": run.price_per_gpu_hour,
        "running_at": iso_utc(run.running_at) if run.running_at is not None else None,
        "ended_at": iso_utc(run.ended_at) if run.ended_at is not None else None,
    }
