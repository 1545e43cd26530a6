"""The paid tail is rows of the one table (core/paid_tail.py): what the driver hears of a lane command's end or of a
paid job picks its row through the evaluator a look uses, the two paid timers are guards with ``until``, and no
module outside core/ keeps a trigger map or fires a paid row by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fellows_fsm.core.effects import CommandEnd, DeletePaid, Step
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.lifecycle import TABLE
from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.paid_tail import LaneSaid, past_time_limit, queued_too_long
from fellows_fsm.core.vocab import HandoffStatus, PaidStatus, State, Trigger

SRC = Path(__file__).resolve().parents[3] / "src" / "fellows_fsm"
HEARD = frozenset(
    {
        Trigger.HANDED_OFF,
        Trigger.HANDOFF_FAILED,
        Trigger.HANDOFF_UNKNOWN,
        Trigger.PAID,
        Trigger.PAID_UNKNOWN,
        Trigger.PAID_FOUND,
        Trigger.PAID_START,
        Trigger.PAID_END,
        Trigger.PAID_FAIL,
        Trigger.PAID_GONE,
        Trigger.PAID_STUCK,
        Trigger.PAID_OVERRUN,
    }
)
"""The triggers the driver's news picks (the lane command's end, a paid lane's answer, the paid timers)."""


def _in(state: str, at: float = 100.0, trigger: str = Trigger.PAID) -> LaneDispatch:
    """A lane-pinned dispatch that entered ``state`` at ``at`` by ``trigger``."""
    step = Step(at=at, source=State.HANDING_OFF, dest=state, trigger=trigger, rung_index=0, qos="", job_id=None)
    return LaneDispatch.restore("d1", "gcp", state=state, history=[step])


# What a paid lane's word asks of a dispatch in each paid state (the map core/paid.py kept before, as rows now).
ANSWERS = [
    (State.PAID_QUEUED, PaidStatus.QUEUED, None),
    (State.PAID_QUEUED, PaidStatus.RUNNING, Trigger.PAID_START),
    (State.PAID_QUEUED, PaidStatus.SUCCEEDED, Trigger.PAID_END),
    (State.PAID_QUEUED, PaidStatus.FAILED, Trigger.PAID_FAIL),
    (State.PAID_QUEUED, PaidStatus.CANCELLED, Trigger.PAID_GONE),
    (State.PAID_QUEUED, PaidStatus.GONE, Trigger.PAID_GONE),
    (State.PAID_QUEUED, PaidStatus.UNKNOWN, None),
    (State.PAID_RUNNING, PaidStatus.QUEUED, None),
    (State.PAID_RUNNING, PaidStatus.RUNNING, None),
    (State.PAID_RUNNING, PaidStatus.SUCCEEDED, Trigger.PAID_END),
    (State.PAID_RUNNING, PaidStatus.FAILED, Trigger.PAID_FAIL),
    (State.PAID_RUNNING, PaidStatus.CANCELLED, Trigger.PAID_GONE),
    (State.PAID_RUNNING, PaidStatus.GONE, Trigger.PAID_GONE),
    (State.PAID_UNKNOWN, PaidStatus.QUEUED, Trigger.PAID_FOUND),
    (State.PAID_UNKNOWN, PaidStatus.RUNNING, Trigger.PAID_START),
    (State.PAID_UNKNOWN, PaidStatus.SUCCEEDED, Trigger.PAID_END),
    (State.PAID_UNKNOWN, PaidStatus.FAILED, Trigger.PAID_FAIL),
    (State.PAID_UNKNOWN, PaidStatus.CANCELLED, Trigger.PAID_GONE),
    (State.PAID_UNKNOWN, PaidStatus.GONE, Trigger.HANDOFF_UNKNOWN),
    (State.PAID_UNKNOWN, PaidStatus.UNKNOWN, None),
]


@pytest.mark.parametrize(("state", "status", "trigger"), ANSWERS, ids=[f"{s}-{w}" for s, w, _ in ANSWERS])
def test_a_paid_lanes_answer_picks_its_row(state: str, status: PaidStatus, trigger: str | None) -> None:
    """A paid lane's word on a job (no limit, no queue timeout) picks the row of the table the old map named, and
    firing it moves the dispatch to that row's destination."""
    d = _in(state)
    picked = d.hear(LaneSaid(PaidLook(status), interval=30.0), 110.0)
    assert picked == trigger
    if trigger is None:
        assert d.news is None  # nothing new: no news is left for a later look
        return
    d.fire(picked, 110.0)
    assert d.news is None
    assert d.history[-1].trigger == trigger


@pytest.mark.parametrize(
    ("status", "followed", "trigger", "state"),
    [
        (HandoffStatus.DONE, False, Trigger.HANDED_OFF, State.HANDED_OFF),
        (HandoffStatus.DONE, True, Trigger.PAID, State.PAID_QUEUED),
        (HandoffStatus.FAILED, False, Trigger.HANDOFF_FAILED, State.HANDOFF_FAILED),
        (HandoffStatus.FAILED, True, Trigger.HANDOFF_FAILED, State.HANDOFF_FAILED),
        (HandoffStatus.UNKNOWN, False, Trigger.HANDOFF_UNKNOWN, State.HANDOFF_UNKNOWN),
        (HandoffStatus.UNKNOWN, True, Trigger.PAID_UNKNOWN, State.PAID_UNKNOWN),
    ],
    ids=["done", "done-followed", "failed", "failed-followed", "lost", "lost-followed"],
)
def test_a_commands_end_picks_its_row(status: str, followed: bool, trigger: str, state: str) -> None:
    """How a lane command ended (and whether its lane follows its job) picks the row the old handoffs map named."""
    d = LaneDispatch("d1", "gcp")
    d.pin(10.0)
    d.fire(Trigger.HAND_OFF, 11.0)
    picked = d.hear(CommandEnd(status, followed), 12.0)
    assert picked == trigger
    d.fire(picked, 12.0)
    assert d.state == state


def test_each_paid_timer_is_a_row_whose_guard_has_until() -> None:
    """paid_stuck and paid_overrun are rows of the table whose guard reads the clock with ``until`` (like a
    rung's deadline), told (a look never asks them; what the driver hears does) and deleting the paid job."""
    for trigger, guard in ((Trigger.PAID_STUCK, queued_too_long), (Trigger.PAID_OVERRUN, past_time_limit)):
        [row] = [r for r in TABLE if r.trigger == trigger]
        assert guard in row.guards
        assert callable(getattr(guard, "until", None)), f"{guard.__name__} has no until"
        assert row.told
        assert row.dest == State.PAID_FAILED


def test_queued_too_long_fires_at_its_until() -> None:
    """A job queued at 100 s on a lane with queue_timeout_seconds = 60: ``until`` says 160 s; heard at 159 s no
    row holds, at 160 s paid_stuck does, and its step deletes the paid job."""
    said = LaneSaid(PaidLook(PaidStatus.QUEUED), queue_timeout=60.0, interval=30.0)
    d = _in(State.PAID_QUEUED, at=100.0)
    assert d.hear(said, 159.0) is None
    d.news = said
    assert queued_too_long.until(d) == 160.0  # type: ignore[attr-defined]
    d.news = None
    assert d.hear(said, 160.0) == Trigger.PAID_STUCK
    effects = d.fire(Trigger.PAID_STUCK, 160.0).effects
    assert d.state == State.PAID_FAILED
    assert any(isinstance(e, DeletePaid) for e in effects)


def test_past_time_limit_reads_the_poll_and_whether_the_lane_stops_it() -> None:
    """A job running since 100 s with a 600 s limit and a 30 s poll: on a lane that does not stop it, deleted from
    670 s (a poll before its limit, ``until`` says so); on one that does, only past 760 s (two polls after)."""
    running = _in(State.PAID_RUNNING, at=100.0, trigger=Trigger.PAID_START)
    free = LaneSaid(PaidLook(PaidStatus.RUNNING), interval=30.0, limit=600.0)
    assert running.hear(free, 669.0) is None
    running.news = free
    assert past_time_limit.until(running) == 670.0  # type: ignore[attr-defined]
    running.news = None
    assert running.hear(free, 670.0) == Trigger.PAID_OVERRUN
    running.news = None
    stops = LaneSaid(PaidLook(PaidStatus.RUNNING), interval=30.0, limit=600.0, stops_at_limit=True)
    assert running.hear(stops, 760.0) is None
    assert running.hear(stops, 761.0) == Trigger.PAID_OVERRUN


def test_a_blind_poll_deletes_only_at_a_passed_bound() -> None:
    """A lane that could not be looked at: a queued job past its queue timeout is not deleted (no look says it is
    still queued), one that may have run past its limit is (a delete by name needs no look)."""
    blind = LaneSaid(None, blind=True, queue_timeout=60.0, interval=30.0, limit=600.0)
    d = _in(State.PAID_QUEUED, at=100.0)
    assert d.hear(blind, 200.0) is None
    assert d.hear(blind, 700.0) == Trigger.PAID_OVERRUN


def _outside_core() -> list[Path]:
    return [p for p in SRC.rglob("*.py") if "core" not in p.relative_to(SRC).parts[:1]]


def test_no_trigger_map_or_paid_trigger_fired_outside_core() -> None:
    """Outside core/, no dict maps anything to a trigger, and a paid or lane-command-end trigger is only ever
    compared with (to write a step's words), never chosen, passed or assigned: the table picks those rows."""
    found = []
    for path in _outside_core():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        compared = {id(n) for c in ast.walk(tree) if isinstance(c, ast.Compare) for n in ast.walk(c)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict) and any(
                isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "Trigger"
                for v in node.values
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: a trigger map")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Trigger"
                and node.attr in {t.name for t in HEARD}
                and id(node) not in compared
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: Trigger.{node.attr} chosen outside the table")
    assert found == []


def test_the_table_holds_every_heard_trigger_and_lifecycle_says_so() -> None:
    """Every trigger the driver's news picks is a row of TABLE, and lifecycle.py's first line claims the one table."""
    assert {row.trigger for row in TABLE} >= HEARD
    first = (SRC / "core" / "lifecycle.py").read_text(encoding="utf-8").splitlines()[0]
    assert "every transition a dispatch can take, and everything that decides one, in this one table" in first
