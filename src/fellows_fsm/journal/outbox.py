"""The notifications' outbox: the event rows a step is told as (written inside the step's own transaction by
``Journal.write``: no event without its step, no step without its events), and what became of each at each sink.

Only SQL and the facts a step's rows give (the rung left, the paid run's worst case; a rung change's come with its
step, ``Record.walk``, read from the dispatch's own history as the rows would give them); which steps are told is
core/events.py, how an event is sent notify/. A sink is sent the events journaled after it was first named
(``mark_sinks``), so a sink added later is not flooded with the past.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from fellows_fsm.core.effects import Record
from fellows_fsm.core.ends import dispatch_result
from fellows_fsm.core.events import BY_TRIGGER, Event, events_of
from fellows_fsm.core.paid import PaidRun
from fellows_fsm.core.vocab import LADDER_LANE
from fellows_fsm.journal.file import JournalFile

__all__ = [
    "DELIVERED",
    "FAILED",
    "PENDING",
    "TOLD",
    "UNDELIVERABLE",
    "Delivery",
    "OutboxEvent",
    "OutboxRows",
    "write_events",
]

PENDING, DELIVERED, FAILED, UNDELIVERABLE = "pending", "delivered", "failed", "undeliverable"
"""A delivery's status: still tried; answered 2xx; refused for good (a 4xx other than 408/429); given up on after
``[notify] give_up_after_seconds`` of retries."""
TOLD = frozenset(str(trigger) for trigger in BY_TRIGGER)
"""The triggers whose steps are told whether final or not (any other step is told only if final: ``events_of``)."""
_SINK_START = "notify.start."
"""The meta key prefix of the last outbox row journaled before a sink was first named (its events come after)."""


@attrs.frozen
class OutboxEvent:
    """One event of the outbox: what a step is told as, with its facts (and, once first sent, its exact body)."""

    seq: int
    event_id: str
    dispatch_id: str
    event: str
    at: float
    facts: dict[str, Any]
    body: str | None


@attrs.frozen
class Delivery:
    """What became of one event at one sink."""

    seq: int
    sink: str
    status: str
    attempts: int
    first_at: float | None
    last_at: float | None
    next_at: float | None
    answer: str
    event: str = ""
    event_id: str = ""
    dispatch_id: str = ""


@functools.lru_cache(maxsize=64)
def _rung_lanes(ladder: str) -> tuple[str, ...]:
    """The lane of each rung of a journaled ladder (the same few ladders over and over: parsed once each)."""
    return tuple(str(rung.get("lane", LADDER_LANE)) for rung in json.loads(ladder or "[]"))


def _lanes_of(db: sqlite3.Connection, dispatch_id: str) -> Callable[[int], str]:
    """The lane of each rung index of a dispatch (its own lane past its ladder), from one read of its row."""
    row = db.execute("SELECT ladder, lane FROM dispatches WHERE id=?", (dispatch_id,)).fetchone()
    if row is None:
        return lambda _: LADDER_LANE
    rungs, lane = _rung_lanes(row[0] or "[]"), str(row[1])
    return lambda index: rungs[index] if 0 <= index < len(rungs) else lane


def _paid_facts(db: sqlite3.Connection, dispatch_id: str, at: float) -> dict[str, Any] | None:
    row = db.execute("SELECT * FROM paid_runs WHERE dispatch_id=?", (dispatch_id,)).fetchone()
    if row is None:
        return None
    run = PaidRun(**dict(row))
    return {
        "lane": run.lane,
        "gpus": run.gpus,
        "price_per_gpu_hour": run.price_per_gpu_hour,
        "worst_case_gpu_hours": _number(run.bound_gpu_hours),
        "worst_case_cost": _number(run.bound_cost),
        "gpu_hours": _number(run.gpu_hours(at)),
        "cost": _number(run.cost(at)),
    }


def _number(value: float | None) -> float | None:
    """A figure for JSON: None when unknown or unbounded (no time limit: no worst case)."""
    return None if value is None or not math.isfinite(value) else round(value, 6)


def _facts(db: sqlite3.Connection, effect: Record, step_seq: int, event: Event) -> dict[str, Any]:
    """What the event says beyond the dispatch itself, read from the rows this transaction has written so far."""
    step, d = effect.step, effect.dispatch_id
    facts: dict[str, Any] = {
        "trigger": step.trigger,
        "state": step.dest,
        "reason": step.reason or step.note or "",
    }
    if event in (Event.QUEUED, Event.STARTED) and step.qos:
        facts.update(lane=_lanes_of(db, d)(step.rung_index), qos=step.qos, job_id=step.job_id)
    elif event == Event.QUEUED:  # pinned to a lane: no rung, its lane
        lane = db.execute("SELECT lane FROM dispatches WHERE id=?", (d,)).fetchone()
        facts["lane"] = lane[0] if lane is not None else None
    if event == Event.RUNG_CHANGED and (walk := effect.walk) is not None:  # from the dispatch's history: no read
        came = {"lane": walk.from_lane, "qos": walk.from_qos} if walk.from_qos is not None else None
        facts.update({"from": came, "to": {"lane": walk.to_lane, "qos": step.qos}, "why": walk.why})
    elif event == Event.RUNG_CHANGED:
        # The step before this one (the rung left), and the last park (why it was left), in one backward walk of
        # the dispatch's rows: this step is the newest (its row was just written) and is no park (a rung change).
        earlier = db.execute(
            "SELECT rung_index, qos, trigger, reason, note FROM transitions WHERE dispatch_id=? AND seq<?"
            " ORDER BY seq DESC",
            (d, step_seq),
        )
        before = why = earlier.fetchone()
        while why is not None and why[2] != "park":
            why = earlier.fetchone()
        earlier.close()
        lanes = _lanes_of(db, d)
        facts["from"] = {"lane": lanes(before[0]), "qos": before[1]} if before is not None else None
        facts["to"] = {"lane": lanes(step.rung_index), "qos": step.qos}
        said = (why[3] or why[4] or "") if why is not None else ""
        # A park with no reason of SLURM's nor a policy's: its window closed with the job still pending.
        facts["why"] = said or (f"no start on {before[1]} within its window" if before is not None else "")
    if event in (Event.HANDED_OFF, Event.ENDED, Event.ATTENTION, Event.STARTED) and (
        cost := _paid_facts(db, d, step.at)
    ):
        facts["cost"] = cost
        if event == Event.STARTED and not step.qos:
            facts["lane"] = cost["lane"]
    if event == Event.ENDED:  # one result word on every lane (core/ends.py), the job's exit code where there is one
        end = db.execute("SELECT result, exit_code FROM ends WHERE dispatch_id=?", (d,)).fetchone()
        handoff = db.execute("SELECT lane, exit_status FROM handoffs WHERE dispatch_id=?", (d,)).fetchone()
        word = dispatch_result(step.dest, effect.outcome, final=True, ended=end[0] if end is not None else None)
        facts["result"] = word
        facts["outcome"] = effect.outcome
        facts["exit_code"] = end[1] if end is not None else handoff[1] if handoff is not None else None
    elif event == Event.ATTENTION:
        facts["result"] = step.dest
        facts["outcome"] = effect.outcome
        handoff = db.execute("SELECT lane, exit_status FROM handoffs WHERE dispatch_id=?", (d,)).fetchone()
        facts["exit_code"] = handoff[1] if handoff is not None else None
    if event == Event.HANDED_OFF and "cost" not in facts:
        handoff = db.execute("SELECT lane FROM handoffs WHERE dispatch_id=?", (d,)).fetchone()
        facts["lane"] = handoff[0] if handoff is not None else None
    return facts


def write_events(db: sqlite3.Connection, effect: Record, step_seq: int) -> None:
    """Journal the events ``effect``'s step is told as (none for most), in the step's own transaction."""
    for event in events_of(effect.step, final=effect.final):
        db.execute(
            "INSERT INTO outbox (event_id, dispatch_id, event, at, step_seq, facts) VALUES (?,?,?,?,?,?)",
            (
                uuid.uuid4().hex,
                effect.dispatch_id,
                str(event),
                effect.step.at,
                step_seq,
                json.dumps(_facts(db, effect, step_seq, event)),
            ),
        )


def _event(row: sqlite3.Row) -> OutboxEvent:
    values = dict(row)
    values.pop("step_seq", None)
    values["facts"] = json.loads(values["facts"])
    return OutboxEvent(**values)


class OutboxRows(JournalFile):
    """The outbox's reads and writes, for the Journal (journal/store.py) to inherit."""

    def has_outbox(self) -> bool:
        """Does the file have the outbox yet? A journal of an older schema opened to read has none until a driver
        upgrades it: its readers see no event and no delivery, not a "damaged" journal."""
        if not getattr(self, "_outbox_known", False):
            rows = self._read("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='deliveries'")
            self._outbox_known = bool(rows[0][0])
        return self._outbox_known

    def put_event(self, dispatch_id: str, event: str, at: float, facts: dict[str, Any]) -> str:
        """Journal an event that is no dispatch's step (a budget window passing a threshold); returns its id."""
        event_id = uuid.uuid4().hex
        with self._write() as db:
            db.execute(
                "INSERT INTO outbox (event_id, dispatch_id, event, at, step_seq, facts) VALUES (?,?,?,?,NULL,?)",
                (event_id, dispatch_id, event, at, json.dumps(facts)),
            )
        return event_id

    def mark_sinks(self, names: Sequence[str]) -> None:
        """Remember, for each sink not seen before, the last event journaled now: it is sent only the later ones."""
        if not names:
            return
        with self._write() as db:
            last = int(db.execute("SELECT coalesce(max(seq), 0) FROM outbox").fetchone()[0])
            for name in names:
                db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", (_SINK_START + name, json.dumps(last))
                )

    def sink_start(self, name: str) -> int | None:
        rows = self._read("SELECT value FROM meta WHERE key=?", (_SINK_START + name,))
        return int(json.loads(rows[0][0])) if rows else None

    def last_event(self) -> int:
        """The seq of the last event journaled (0: none)."""
        if not self.has_outbox():
            return 0
        return int(self._read("SELECT coalesce(max(seq), 0) FROM outbox")[0][0])

    def unsent(self, sink: str, events: Sequence[str], *, limit: int = 200, after: int = 0) -> list[OutboxEvent]:
        """The events ``sink`` asks for, journaled after it was named (and after seq ``after``, below which the
        caller knows every one final), with no final delivery yet, oldest first."""
        if not self.has_outbox():
            return []
        start = self.sink_start(sink)
        if start is None or not events:
            return []
        start = max(start, after)
        marks = ",".join("?" * len(events))
        rows = self._read(
            "SELECT o.* FROM outbox o LEFT JOIN deliveries d ON d.seq = o.seq AND d.sink = ?"  # noqa: S608 - placeholders only
            f" WHERE o.seq > ? AND o.event IN ({marks}) AND (d.status IS NULL OR d.status = ?)"
            " ORDER BY o.seq LIMIT ?",
            (sink, start, *events, PENDING, limit),
        )
        return [_event(r) for r in rows]

    def event(self, seq: int) -> OutboxEvent | None:
        rows = self._read("SELECT * FROM outbox WHERE seq=?", (seq,))
        return _event(rows[0]) if rows else None

    def events_of(self, dispatch_id: str) -> list[OutboxEvent]:
        """A dispatch's events, in the order they were journaled."""
        if not self.has_outbox():
            return []
        return [_event(r) for r in self._read("SELECT * FROM outbox WHERE dispatch_id=? ORDER BY seq", (dispatch_id,))]

    def fix_body(self, seq: int, body: str) -> str:
        """Keep ``body`` as the event's exact bytes unless one was kept already; returns the kept one (every retry,
        every sink, every driver after a restart sends the same bytes)."""
        with self._write() as db:
            db.execute("UPDATE outbox SET body=? WHERE seq=? AND body IS NULL", (body, seq))
            return str(db.execute("SELECT body FROM outbox WHERE seq=?", (seq,)).fetchone()[0])

    def delivery(self, seq: int, sink: str) -> Delivery | None:
        rows = self._read("SELECT * FROM deliveries WHERE seq=? AND sink=?", (seq, sink))
        return Delivery(**dict(rows[0])) if rows else None

    def put_delivery(
        self, seq: int, sink: str, *, status: str, at: float, next_at: float | None, answer: str
    ) -> Delivery:
        """Record one attempt at sending event ``seq`` to ``sink`` and what it became."""
        with self._write() as db:
            db.execute(
                "INSERT INTO deliveries (seq, sink, status, attempts, first_at, last_at, next_at, answer)"
                " VALUES (?,?,?,1,?,?,?,?) ON CONFLICT(seq, sink) DO UPDATE SET status=excluded.status,"
                " attempts=attempts+1, last_at=excluded.last_at, next_at=excluded.next_at, answer=excluded.answer",
                (seq, sink, status, at, at, next_at, answer[:500]),
            )
            row = db.execute("SELECT * FROM deliveries WHERE seq=? AND sink=?", (seq, sink)).fetchone()
        return Delivery(**dict(row))

    def recent_deliveries(self, limit: int = 50) -> list[Delivery]:
        """The latest deliveries (their event's name and id joined in), newest last."""
        if not self.has_outbox():
            return []
        rows = self._read(
            "SELECT d.*, o.event, o.event_id, o.dispatch_id FROM deliveries d JOIN outbox o ON o.seq = d.seq"
            " ORDER BY d.last_at DESC, d.seq DESC LIMIT ?",
            (limit,),
        )
        return [Delivery(**dict(r)) for r in rows][::-1]

    def delivery_counts(self) -> dict[tuple[str, str], int]:
        """How many deliveries each sink has in each status."""
        if not self.has_outbox():
            return {}
        rows = self._read("SELECT sink, status, count(*) FROM deliveries GROUP BY sink, status")
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def paused(self) -> list[tuple[str, int, float, str, float]]:
        """Each live dispatch whose last step is a ``pause`` (its cluster stopped answering; a ``resume`` ends it):
        (dispatch id, the pause's step seq, when, its rung's lane, its rung's park cap), in ONE query."""
        rows = self._read(
            "SELECT d.id, t.seq, t.at, t.rung_index, d.ladder FROM dispatches d JOIN transitions t ON t.seq ="
            " (SELECT max(seq) FROM transitions WHERE dispatch_id = d.id) WHERE d.final = 0 AND t.trigger = 'pause'"
        )
        out = []
        for r in rows:
            rungs = json.loads(r[4] or "[]")
            rung = rungs[r[3]] if 0 <= r[3] < len(rungs) else {}
            out.append(
                (
                    str(r[0]),
                    int(r[1]),
                    float(r[2]),
                    str(rung.get("lane", LADDER_LANE)),
                    float(rung.get("park_cap_seconds", 0.0)),
                )
            )
        return out

    def rung_change_counts(self) -> dict[tuple[str, str, str], int]:
        """How many ``rung_changed`` events each (to lane, from QoS, to QoS) has, counted in ONE query."""
        if not self.has_outbox():
            return {}
        rows = self._read(
            "SELECT coalesce(json_extract(facts, '$.to.lane'), ''), coalesce(json_extract(facts, '$.from.qos'), ''),"
            " coalesce(json_extract(facts, '$.to.qos'), ''), count(*) FROM outbox WHERE event='rung_changed'"
            " GROUP BY 1, 2, 3"
        )
        return {(str(r[0]), str(r[1]), str(r[2])): int(r[3]) for r in rows}

    def paid_totals(self, now: float) -> dict[str, tuple[float, float]]:
        """Every paid run's GPU-hours and cost so far, summed per lane in ONE query (core/paid.py ``PaidRun``'s
        arithmetic: its lane's own run time if it reported one, else from its first running look to its end)."""
        rows = self._read(
            "SELECT lane, TOTAL(h), TOTAL(coalesce(price, 0) * h) FROM (SELECT lane, price_per_gpu_hour AS price,"
            " gpus * (CASE WHEN run_seconds IS NOT NULL THEN MAX(run_seconds, 0.0) WHEN running_at IS NULL THEN 0.0"
            " ELSE MAX(COALESCE(ended_at, ?) - running_at, 0.0) END) / 3600.0 AS h FROM paid_runs) GROUP BY lane",
            (now,),
        )
        return {str(r[0]): (float(r[1]), float(r[2])) for r in rows}
