"""The sans-I/O core on its own: events in, effects out (asserted as httpx tests a handler), and its import wall."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fellows_fsm import JobSpec, Observation, Phase, QosRejected, SlurmSettings, SubmitRejected
from fellows_fsm.core import machine
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.core.effects import Attach, CancelIfPending, Decision, FindByToken, HandOff, MoveQos, Record, Submit
from fellows_fsm.core.lifecycle import INITIAL, RUNG, TABLE
from fellows_fsm.core.machine import build_machine
from fellows_fsm.core.vocab import LANE_STATES, Trigger

SRC = Path(__file__).resolve().parents[3] / "src" / "fellows_fsm"
CORE = SRC / "core"
SPEC = JobSpec("train", "train.sbatch", gpus=8)
LADDER = SlurmSettings(park_cap_seconds=60).ladder
T0 = 1_000_000.0
ALLOWED_IMPORTS = {
    "__future__",
    "attrs",
    "bisect",
    "collections",
    "collections.abc",
    "datetime",
    "enum",
    "functools",
    "math",
    "operator",
    "re",
    "statistics",
    "time",
    "transitions",
    "typing",
    "fellows_fsm.errors",
    "fellows_fsm.scheduler.port",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_nothing_that_does_io(path: Path) -> None:
    """Every core module imports only pure modules: no port, journal, subprocess, sqlite3, click or rich."""
    outside = {name for name in _imports(path) if not name.startswith("fellows_fsm.core")} - ALLOWED_IMPORTS
    assert outside == set(), f"{path.name} imports {sorted(outside)}"


def _without_from_script(path: Path) -> tuple[set[str], set[str]]:
    """The modules ``path`` imports at run time outside ``JobSpec.from_script`` (type-only imports under
    ``if TYPE_CHECKING`` aside), and those it imports inside it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    within: set[str] = set()
    for node in ast.walk(tree):
        typing_only = isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        if typing_only or (isinstance(node, ast.FunctionDef) and node.name == "from_script"):
            inner = {id(n) for n in ast.walk(node)} - {id(node)}
            skipped |= inner
            if not typing_only:
                within |= {n.module for n in ast.walk(node) if isinstance(n, ast.ImportFrom) and n.module}
    outside: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            outside.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            outside.add(node.module)
    return outside, within


def test_the_pure_modules_the_core_may_import_do_no_io() -> None:
    """errors.py and scheduler.py, which the core imports, themselves import no I/O module (but each other: the
    port's JobSpec refuses a bad ``extra_args`` with a UsageError). The one exception is ``JobSpec.from_script``, a
    constructor for programs that reads a script: it imports the script reader when called, and no core module
    calls it."""
    outside, within = _without_from_script(SRC / "scheduler" / "port.py")
    assert within == {"fellows_fsm.scheduler.script"}
    assert not [p.name for p in CORE.glob("*.py") if "from_script" in p.read_text(encoding="utf-8")]
    for name, imports in (("errors.py", _imports(SRC / "errors.py")), ("scheduler/port.py", outside)):
        assert imports <= {
            "__future__",
            "attrs",
            "enum",
            "functools",
            "re",
            "collections.abc",
            "typing",
            "fellows_fsm.errors",
        }, name


def test_one_cancel_path_in_the_code() -> None:
    """Only the driver calls the port's cancels (cancel_if_pending for a parked job, cancel for a user's cancel, a
    Ctrl-C and a stray): the core asks, it never calls. driver/clusters.py is the port over several clusters (it only
    routes each id to its cluster's port, for the driver). The demo's cleanup of its own filler jobs is not the
    lifecycle and is the one other caller."""
    # fellows.cancel: the CLI calls the API; timer.cancel: a threading.Timer's (ui/logs.py bounds a lane's command)
    pattern = re.compile(r"(?<!fellows)(?<!timer)\.cancel(_if_pending)?\(")
    sources = {str(p.relative_to(SRC)): p.read_text(encoding="utf-8") for p in SRC.rglob("*.py")}
    callers = sorted(name for name, text in sources.items() if pattern.search(text))
    assert callers == ["driver/clusters.py", "driver/executor.py", "ui/demo.py"]
    demo = [line for line in sources["ui/demo.py"].splitlines() if pattern.search(line)]
    assert demo == ["            scheduler.cancel([job_id])"]


def test_every_table_trigger_fires_through_the_machine() -> None:
    """Each trigger the table names (but the first steps, submit and pin, the initial state's) is an event of the
    ladder's machine, and each row from a lane state one of the lane-pinned dispatch's machine too."""
    events = build_machine(LADDER).events
    lane_events = build_machine(None).events
    for row in TABLE:
        if row.source == INITIAL:
            assert row.trigger in (Trigger.SUBMIT, Trigger.PIN), row.trigger
            continue
        assert row.trigger in events, row.trigger
        if row.source in LANE_STATES:
            assert row.trigger in lane_events, row.trigger


def test_a_look_asks_the_table_rows_in_order() -> None:
    """A rung's look asks the table's rows of a rung, in table order, without the told ones (submit, pause, ...)."""
    asked = [trigger for trigger, *_ in machine.rows_by_state(LADDER)["SUBMITTED_high_eur"]]
    table = [row.trigger for row in TABLE if row.source == RUNG and not row.told]
    assert asked == table
    park = next(
        (first, *rest)
        for trigger, first, rest, _ in machine.rows_by_state(LADDER)["SUBMITTED_high_eur"]
        if trigger == "park"
    )
    assert [g.__name__ for g in park][:3] == ["rung_expired", "walks_ladder", "may_leave_rung"]


def kinds(decision: Decision) -> list[str]:
    return [type(e).__name__ + (f":{e.step.trigger}" if isinstance(e, Record) else "") for e in decision.effects]


def test_submit_journals_first_then_asks_for_sbatch_on_high_eur() -> None:
    """The first submit is a Record of the submit step, then a Submit on the preferred QoS, tagged with its token."""
    d = Dispatch("c1", SPEC, LADDER)
    decision = d.submit(T0)
    assert kinds(decision) == ["Record:submit", "Submit"]
    submit = decision.effects[1]
    assert isinstance(submit, Submit)
    assert (submit.qos, submit.token, submit.deadline) == ("high-eur", "fsm-c1-r0", None)
    assert decision.wake_at == T0 + 60


def test_the_answer_to_a_submit_is_journaled_as_the_rungs_job() -> None:
    """submitted() asks only to attach the job id to rung 0; nothing else happens until a look."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    decision = d.submitted("101", T0 + 1)
    assert decision.effects == (Attach("c1", 0, "101", T0 + 1),)


def test_a_look_before_the_deadline_changes_nothing() -> None:
    """A pending look inside the window returns no effect and the window's end as the wake time."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    d.submitted("101", T0)
    decision = d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 59)
    assert decision == Decision((), T0 + 60)


def test_a_look_at_the_deadline_parks_and_asks_for_a_cancel() -> None:
    """At the window's end the dispatch journals its park and asks the driver to cancel the job if still pending."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    d.submitted("101", T0)
    decision = d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 60)
    assert kinds(decision) == ["Record:park", "CancelIfPending"]
    assert decision.effects[-1] == CancelIfPending("c1", "101")
    assert d.state == "PARKED"


def test_a_proven_cancel_walks_on_and_asks_for_the_next_rungs_submit() -> None:
    """A cancel the port proves: cancel and resubmit are journaled, then a Submit on normal-eur follows."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    d.submitted("101", T0)
    d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 60)
    decision = d.cancel_answered(Observation("101", Phase.GONE, "CANCELLED"), T0 + 61)
    assert kinds(decision) == ["Record:cancel", "Record:resubmit", "Submit"]
    submit = decision.effects[-1]
    assert isinstance(submit, Submit)
    assert (submit.qos, submit.token) == ("normal-eur", "fsm-c1-r1")


def test_without_budget_a_cancelled_dispatch_waits_for_a_later_tick() -> None:
    """may_change_rung=False: the dispatch stops in CANCELLED and asks for nothing."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    d.submitted("101", T0)
    d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 60)
    decision = d.cancel_answered(Observation("101", Phase.GONE, "CANCELLED"), T0 + 61, may_change_rung=False)
    assert kinds(decision) == ["Record:cancel"]
    assert d.state == "CANCELLED"


def test_the_last_rung_gone_hands_off_exactly_once() -> None:
    """When the last rung's job is confirmed gone, give_up is journaled and one HandOff is asked for."""
    d = Dispatch("c1", SPEC, SlurmSettings(park_cap_seconds=60, qos_ladder=[]).ladder)
    d.submit(T0)
    d.submitted("101", T0)
    d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 60)
    decision = d.cancel_answered(Observation("101", Phase.GONE, "CANCELLED"), T0 + 61)
    assert kinds(decision) == ["Record:cancel", "Record:give_up", "HandOff"]
    assert decision.effects[-1] == HandOff("c1")
    assert d.advance(None, T0 + 62).effects == ()


def test_an_unanswered_submit_is_looked_up_by_token_before_any_resubmit() -> None:
    """With no answer to its submit, the next look asks for FindByToken, never a second Submit."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    decision = d.advance(None, T0 + 5)
    assert decision.effects == (FindByToken("c1", "fsm-c1-r0"),)
    found = d.found(None, T0 + 5)
    assert [type(e).__name__ for e in found.effects] == ["Submit"]


def test_a_lost_submit_found_after_its_window_is_parked_not_duplicated() -> None:
    """Found by token after the window closed: attach it, park it, and cancel it; no new job is asked for."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    assert d.advance(None, T0 + 61).effects == (FindByToken("c1", "fsm-c1-r0"),)
    decision = d.found(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 61)
    assert kinds(decision) == ["Attach", "Record:park", "CancelIfPending"]


def test_a_refused_qos_skips_the_rung_and_a_refused_job_is_raised() -> None:
    """A QoS refusal drops the rung (the next submit is on normal-eur); a refusal of the job itself is raised."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    decision = d.submit_refused(QosRejected("high-eur", "Invalid qos specification"), T0)
    assert kinds(decision) == ["Record:drop", "Record:resubmit", "Submit"]
    e = Dispatch("c2", SPEC, LADDER)
    e.submit(T0)
    with pytest.raises(SubmitRejected, match="bad script"):
        e.submit_refused(SubmitRejected("bad script"), T0)


def test_in_place_asks_for_a_move_and_journals_it_with_the_same_job() -> None:
    """With in_place, a park asks for MoveQos; its acceptance journals the move and re-attaches the same job."""
    d = Dispatch("c1", SPEC, LADDER, in_place=True)
    d.submit(T0)
    d.submitted("101", T0)
    decision = d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 60)
    assert decision.effects[-1] == MoveQos("c1", "101", "normal-eur")
    moved = d.move_answered(True, T0 + 60)
    assert kinds(moved) == ["Record:move", "Attach"]
    assert moved.effects[-1] == Attach("c1", 1, "101", T0 + 60)
    assert d.move_answered(False, T0 + 61).effects == ()


def test_a_pause_stops_the_clock_and_the_resume_gives_the_outage_back() -> None:
    """pause is journaled with no port effect; the next answered look resumes first and moves the deadline."""
    d = Dispatch("c1", SPEC, LADDER)
    d.submit(T0)
    d.submitted("101", T0)
    assert kinds(d.pause(T0 + 30, since=T0 + 20)) == ["Record:pause"]
    decision = d.advance(Observation("101", Phase.PENDING, "PENDING", "Priority", "high-eur"), T0 + 120)
    assert kinds(decision) == ["Record:resume"]
    assert d.deadline == T0 + 60 + 100


def test_the_driver_is_the_one_that_starts_a_lane_command() -> None:
    """Only the driver starts a lane's command (Handoffs.start, which runs the lane's own start): the router asks
    it to (a handoff after the ladder, a dispatch pinned to a lane), the core asks with a HandOff effect."""
    pattern = re.compile(r"handoffs\.start\(")
    callers = sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))
    )
    assert callers == ["driver/executor.py"]
    lane_starts = re.compile(r"\blane\.start\(")
    assert sorted(
        str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if lane_starts.search(p.read_text(encoding="utf-8"))
    ) == ["driver/handoffs.py"]
