"""A dispatch pinned straight to a command lane (core/lane.py): its steps are rows of the one table, fired by the
same engine as a ladder dispatch's, and what each journals of the lane's command."""

from __future__ import annotations

import pytest

from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import Record
from fellows_fsm.core.lane import LaneDispatch
from fellows_fsm.core.lifecycle import TABLE
from fellows_fsm.core.machine import build_machine
from fellows_fsm.core.vocab import HandoffStatus, Outcome, State, Trigger
from fellows_fsm.errors import TransitionNotAllowed
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.port import JobSpec

LADDER = SlurmSettings(park_cap_seconds=60).ladder


def _records(d: LaneDispatch, trigger: str, now: float, note: str = "") -> list[Record]:
    return [e for e in d.fire(trigger, now, note=note).effects if isinstance(e, Record)]


@pytest.mark.parametrize(
    ("end", "state", "outcome", "status"),
    [
        (Trigger.HANDED_OFF, State.HANDED_OFF, Outcome.HANDED_OFF, HandoffStatus.DONE),
        (Trigger.HANDOFF_FAILED, State.HANDOFF_FAILED, Outcome.HANDOFF_FAILED, HandoffStatus.FAILED),
        (Trigger.HANDOFF_UNKNOWN, State.HANDOFF_UNKNOWN, Outcome.HANDOFF_UNKNOWN, HandoffStatus.UNKNOWN),
    ],
    ids=["done", "failed", "unknown"],
)
def test_a_pinned_dispatch_walks_pin_hand_off_and_its_end_through_the_table(
    end: str, state: str, outcome: str, status: str
) -> None:
    """pin (-> HANDING_OFF), hand_off (the command started, stays), then its end: each a journaled step of a row,
    with the dispatch's state, outcome and finality and the command's state the row names."""
    d = LaneDispatch("d1", "gcp")
    pin = [e for e in d.pin(10.0).effects if isinstance(e, Record)]
    start = _records(d, Trigger.HAND_OFF, 11.0, "lane gcp")
    ended = _records(d, end, 12.0, "gcp command exited")
    steps = [(r.step.trigger, r.step.source, r.step.dest, r.final, r.outcome) for r in (*pin, *start, *ended)]
    assert steps == [
        ("pin", "", State.HANDING_OFF, False, ""),
        ("hand_off", State.HANDING_OFF, State.HANDING_OFF, False, ""),
        (end, State.HANDING_OFF, state, True, outcome),
    ]
    assert [r.command.status if r.command else None for r in (*pin, *start, *ended)] == [None, "started", status]
    assert all((r.label, r.step.qos, r.step.job_id) == (r.step.dest, "", None) for r in (*pin, *start, *ended))
    assert (d.state, d.is_final, [s.trigger for s in d.history]) == (state, True, ["pin", "hand_off", end])


def test_a_lost_command_the_probe_finds_no_job_of_is_re_run_as_a_step() -> None:
    """re_run is a row from HANDING_OFF that stays there and journals the command started again."""
    d = LaneDispatch("d1", "gcp")
    d.pin(1.0)
    _records(d, Trigger.HAND_OFF, 2.0)
    (again,) = _records(d, Trigger.RE_RUN, 3.0, "gcp's probe finds no job of its lost command: run again")
    assert (again.step.source, again.step.dest, again.final) == (State.HANDING_OFF, State.HANDING_OFF, False)
    assert again.command is not None
    assert again.command.status == HandoffStatus.STARTED


def test_a_cancel_before_the_command_ran_withdraws_it_and_after_is_refused() -> None:
    """recall from HANDING_OFF holds only while no command was started (command_not_started); once started, the
    dispatch is the lane's: TransitionNotAllowed names the guard."""
    before = LaneDispatch("d1", "gcp")
    before.pin(1.0)
    (withdrawn,) = [e for e in before.recall([], 2.0).effects if isinstance(e, Record)]
    assert (withdrawn.step.dest, withdrawn.final, withdrawn.outcome) == (State.WITHDRAWN, True, Outcome.WITHDRAWN)
    after = LaneDispatch("d2", "gcp")
    after.pin(1.0)
    after.fire(Trigger.HAND_OFF, 2.0)
    with pytest.raises(TransitionNotAllowed, match="command_not_started did not hold"):
        after.recall([], 3.0)
    assert after.state == State.HANDING_OFF


def test_a_pinned_dispatch_restored_from_its_steps_stands_where_they_left_it() -> None:
    """restore replays the journaled steps through the same rows; with no steps (an old journal) the row's state."""
    live = LaneDispatch("d1", "gcp")
    live.pin(1.0)
    live.fire(Trigger.HAND_OFF, 2.0)
    again = LaneDispatch.restore("d1", "gcp", state="ignored", history=live.history)
    assert (again.state, [s.trigger for s in again.history]) == (State.HANDING_OFF, ["pin", "hand_off"])
    old = LaneDispatch.restore("d2", "gcp", state=State.HANDED_OFF, history=[])
    assert (old.state, old.is_final) == (State.HANDED_OFF, True)


def test_pin_is_a_first_step_of_a_lane_dispatch_only() -> None:
    """A ladder dispatch cannot be pinned to a lane by a step, and a lane dispatch is pinned once."""
    ladder = Dispatch("d1", JobSpec("j", "/j.sh"), LADDER)
    with pytest.raises(TransitionNotAllowed, match="'pin' is not allowed"):
        ladder.fire(Trigger.PIN, 1.0)
    lane = LaneDispatch("d2", "gcp")
    lane.pin(1.0)
    with pytest.raises(TransitionNotAllowed, match="'pin' is not allowed"):
        lane.pin(2.0)


def test_the_lane_machine_holds_only_the_rows_from_the_lane_states() -> None:
    """build_machine(None) has the lane command's rows, the paid run's and a withdrawal, never a rung's, a park or
    an interrupt."""
    events = build_machine(None).events
    commands = {"recall", "hand_off", "re_run", "handed_off", "handoff_failed", "handoff_unknown"}
    paid = {"paid", "paid_start", "paid_end", "paid_fail", "paid_gone", "paid_stuck", "paid_overrun"}
    paid |= {"paid_unknown", "paid_found"}  # a lost command on a lane with status: followed by it
    budget = {"no_budget", "budget_wait"}  # pinned to a paid lane: the [budget], before its command starts
    assert set(events) == commands | paid | budget
    hand_off = events["hand_off"].transitions
    assert set(hand_off) == {State.HANDING_OFF}  # not from FAILED_TO_GCP: a lane-pinned dispatch has no ladder
    assert {row.trigger for row in TABLE if row.command} == {
        "paid",
        "hand_off",
        "re_run",
        "handed_off",
        "handoff_failed",
        "handoff_unknown",
        "paid_unknown",
    }
