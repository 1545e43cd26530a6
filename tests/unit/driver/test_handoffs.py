"""A lane command a router started is never started again after a restart, unless the lane's probe says it made
no job; with no probe its fate is unknown (HANDOFF_UNKNOWN), never re-run and never called failed; a command that
surely never started (its mark still "new") is started once. Real processes, the real wrapper, the fake port."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm import FakeScheduler, FellowsConfig, JobSpec
from fellows_fsm.config.file import Config
from fellows_fsm.core.effects import Command
from fellows_fsm.core.vocab import HandoffStatus, Trigger
from fellows_fsm.driver.router import Router
from fellows_fsm.errors import HandoffUnknown
from fellows_fsm.journal.history import history_entries
from fellows_fsm.journal.queries import outcome_error
from fellows_fsm.journal.schema import DispatchRow
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.command.lane import CommandLane
from fellows_fsm.lanes.handoff import HandoffFiles
from tests.processes import processes_with

SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


def _lane(tmp_path: Path, *, sleep: float, probe: bool = False) -> LaneConfig:
    """A gcp lane that sleeps, then appends the dispatch id to tmp_path/gcp.ledger; its probe greps the ledger."""
    book = tmp_path / "gcp.ledger"
    code = f'sleep {sleep}; echo "$1" >> {book}'
    return LaneConfig(
        name="gcp",
        command=("sh", "-c", code, "sh", "{dispatch_id}"),
        probe=("grep", "-qx", "{dispatch_id}", str(book)) if probe else None,
        timeout_seconds=60,
    )


def _ledger(tmp_path: Path) -> list[str]:
    book = tmp_path / "gcp.ledger"
    return book.read_text().split() if book.exists() else []


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[list[Router]]:
    """The routers a test makes (one per 'driver'), their journals closed after."""
    made: list[Router] = []
    yield made
    for r in made:
        r.journal.close()


def _router(tmp_path: Path, lane: LaneConfig, made: list[Router]) -> Router:
    config = Config(fellows=FellowsConfig(park_cap_seconds=60), lanes=(lane,), state_dir=tmp_path)
    r = Router(config, FakeScheduler(total_gpus=64), Journal(config.journal_path)).start()
    made.append(r)
    return r


def _command_runs(tmp_path: Path) -> None:
    """Wait until the lane's command itself (the sh, not its wrapper) runs."""
    for _ in range(500):
        if any(p.split(": ", 1)[1].startswith("sh -c") for p in processes_with(str(tmp_path / "gcp.ledger"))):
            return
        time.sleep(0.02)
    raise AssertionError("the lane's command never ran")


def _die(router: Router, made: list[Router]) -> None:
    """The driver ends (its journal closed, its lock let go) without looking at its command again."""
    router.journal.close()
    made.remove(router)


def _kill_wrapper(pid: int) -> None:
    """SIGKILL the wrapper (a child of this process) and reap it, as a killed driver's init would."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _hand_off(tmp_path: Path, lane: LaneConfig, made: list[Router]) -> tuple[Router, str, int]:
    """A first router that hands SPEC to the gcp lane: the router, the dispatch id and its wrapper's journaled pid."""
    first = _router(tmp_path, lane, made)
    h = first.dispatch(SPEC, pin="gcp")
    handoff = first.journal.handoff(h.dispatch_id)
    assert handoff is not None
    assert handoff.pid is not None
    return first, h.dispatch_id, handoff.pid


def _restart(first: Router, tmp_path: Path, lane: LaneConfig, made: list[Router]) -> Router:
    """The first router gone; the next one made, polled once and waited on until its handoffs end."""
    _die(first, made)
    second = _router(tmp_path, lane, made)
    second.poll()
    second.wait_for_handoffs()
    return second


def _ran_once(router: Router, tmp_path: Path, dispatch_id: str) -> DispatchRow:
    """The dispatch's row, once the command is checked to have run exactly once (one ledger line)."""
    assert _ledger(tmp_path) == [dispatch_id]
    row = router.journal.dispatch(dispatch_id)
    assert row is not None
    return row


def test_a_wrapper_killed_mid_command_with_no_probe_ends_unknown_and_is_never_rerun(
    tmp_path: Path, routers: list[Router]
) -> None:
    """The wrapper killed while its command sleeps, the driver gone: the next router follows the command to its end,
    records HANDOFF_UNKNOWN with what to check (exit 10), and never runs it again."""
    lane = _lane(tmp_path, sleep=1)
    first, dispatch_id, pid = _hand_off(tmp_path, lane, routers)
    _command_runs(tmp_path)
    _kill_wrapper(pid)
    second = _restart(first, tmp_path, lane, routers)  # the next driver: recovers the dispatch, adopts its command
    time.sleep(1.5)  # past the command's sleep: a second run would have written by now
    row = _ran_once(second, tmp_path, dispatch_id)
    assert (row.state, row.outcome, row.final) == ("HANDOFF_UNKNOWN", "handoff-unknown", True)
    ended = second.journal.handoff(dispatch_id)
    assert ended is not None
    assert (ended.status, ended.exit_status) == ("unknown", None)
    error = outcome_error(second.journal, dispatch_id)
    assert isinstance(error, HandoffUnknown)
    assert error.exit_code == 10
    assert f"check gcp for a job of dispatch {dispatch_id}" in str(error)
    _die(second, routers)
    third = _router(tmp_path, lane, routers)  # and no later driver takes it up again
    assert not third.busy


def test_a_lost_command_the_probe_finds_is_handed_off(tmp_path: Path, routers: list[Router]) -> None:
    """The wrapper killed while its command sleeps: once the command made its job, the probe finds it and the
    dispatch is HANDED_OFF, with one ledger line."""
    lane = _lane(tmp_path, sleep=1, probe=True)
    first, dispatch_id, pid = _hand_off(tmp_path, lane, routers)
    _command_runs(tmp_path)
    _kill_wrapper(pid)
    second = _restart(first, tmp_path, lane, routers)
    row = _ran_once(second, tmp_path, dispatch_id)
    assert row.state == "HANDED_OFF"


def test_a_lost_command_the_probe_does_not_find_runs_again_once(tmp_path: Path, routers: list[Router]) -> None:
    """A wrapper and its whole group killed before the command made its job: the probe finds nothing, so the
    command runs again (journaled first), once, and the dispatch is HANDED_OFF with one ledger line."""
    lane = _lane(tmp_path, sleep=1, probe=True)
    first, dispatch_id, pid = _hand_off(tmp_path, lane, routers)
    _command_runs(tmp_path)
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    second = _restart(first, tmp_path, lane, routers)
    row = _ran_once(second, tmp_path, dispatch_id)
    assert row.state == "HANDED_OFF"


def test_a_start_journaled_whose_wrapper_never_ran_is_started_once(tmp_path: Path, routers: list[Router]) -> None:
    """A driver that died after journaling the start but before it spawned the wrapper (its files made, the mark
    still "new"): the next router starts the command, once."""
    lane = _lane(tmp_path, sleep=0)
    first = _router(tmp_path, lane, routers)
    dispatch_id = "feedface0001"
    first.journal.add_lane_dispatch(dispatch_id, SPEC, intent="train", lane="gcp", at=time.time())
    files = HandoffFiles(tmp_path / "handoffs", dispatch_id)
    files.prepare()
    argv = CommandLane(lane).command(dispatch_id, SPEC)  # journaled as the driver journals it, before the spawn
    started = Command(HandoffStatus.STARTED, "gcp", argv)
    first.executor.command_step(first.handoffs.lane_dispatch(dispatch_id), Trigger.HAND_OFF, "lane gcp", started)
    assert files.started() is False
    second = _restart(first, tmp_path, lane, routers)
    row = _ran_once(second, tmp_path, dispatch_id)
    assert row.state == "HANDED_OFF"
    _die(second, routers)
    assert not _router(tmp_path, lane, routers).busy  # done: no later driver starts it again


def test_a_restart_whose_pid_was_never_journaled_finds_the_wrapper_by_its_command_line(
    tmp_path: Path, routers: list[Router]
) -> None:
    """The wrapper runs but its pid never reached the journal (the driver died in between): the next router finds
    it, follows it, and records its exit status; the command ran once."""
    lane = _lane(tmp_path, sleep=1)
    first, dispatch_id, pid = _hand_off(tmp_path, lane, routers)
    with first.journal._write() as db:  # the pid, as if the driver had died before it journaled it
        db.execute("UPDATE handoffs SET pid=NULL WHERE dispatch_id=?", (dispatch_id,))
    second = _restart(first, tmp_path, lane, routers)
    row = _ran_once(second, tmp_path, dispatch_id)
    assert row.state == "HANDED_OFF"
    os.waitpid(pid, 0)  # the wrapper was this process's child (the first router's)


def test_a_killed_wrapper_whose_pid_was_never_journaled_is_followed_by_its_mark(
    tmp_path: Path, routers: list[Router]
) -> None:
    """Neither the wrapper's pid in the journal nor the wrapper alive: its mark names its group, so the next router
    follows the command to its end before it decides (HANDOFF_UNKNOWN, no probe), and the command ran once."""
    lane = _lane(tmp_path, sleep=1)
    first, dispatch_id, pid = _hand_off(tmp_path, lane, routers)
    _command_runs(tmp_path)
    assert HandoffFiles(tmp_path / "handoffs", dispatch_id).marked_pid() == pid
    with first.journal._write() as db:
        db.execute("UPDATE handoffs SET pid=NULL WHERE dispatch_id=?", (dispatch_id,))
    _kill_wrapper(pid)
    second = _restart(first, tmp_path, lane, routers)
    row = _ran_once(second, tmp_path, dispatch_id)  # the command was followed to its end, not given up on at once
    assert row.state == "HANDOFF_UNKNOWN"


def test_a_pinned_dispatch_takes_the_rows_pin_hand_off_handed_off_and_history_shows_them(
    tmp_path: Path, routers: list[Router]
) -> None:
    """submit --pin gcp: the journal holds the steps pin, hand_off (with the command's argv, before it ran) and
    handed_off (with its exit status, in the same step as the state); history reads those steps, nothing else."""
    r = _router(tmp_path, _lane(tmp_path, sleep=0), routers)
    h = r.dispatch(SPEC, pin="gcp")
    r.wait_for_handoffs()
    steps = r.journal.steps(h.dispatch_id)
    assert [(s.trigger, s.source, s.dest) for s in steps] == [
        ("pin", "", "HANDING_OFF"),
        ("hand_off", "HANDING_OFF", "HANDING_OFF"),
        ("handed_off", "HANDING_OFF", "HANDED_OFF"),
    ]
    row, handoff = r.journal.dispatch(h.dispatch_id), r.journal.handoff(h.dispatch_id)
    assert row is not None
    assert handoff is not None
    assert (row.state, row.label, row.final, row.outcome, row.qos) == (
        "HANDED_OFF",
        "HANDED_OFF",
        True,
        "handed-off",
        None,
    )
    assert (handoff.status, handoff.exit_status, handoff.lane, handoff.argv[0]) == ("done", 0, "gcp", "sh")
    assert handoff.started_at == steps[1].at
    assert handoff.finished_at == steps[2].at
    entries = history_entries(row, steps, r.journal.jobs(h.dispatch_id), handoff)
    assert [(e.trigger, e.source, e.dest, e.note) for e in entries] == [
        ("pin", None, "HANDING_OFF", ""),
        ("hand_off", "HANDING_OFF", "HANDING_OFF", "lane gcp"),
        ("handed_off", "HANDING_OFF", "HANDED_OFF", "gcp command exited 0"),
    ]
    assert _ledger(tmp_path) == [h.dispatch_id]


def test_a_pinned_dispatch_cancelled_before_its_command_ran_takes_the_recall_row(
    tmp_path: Path, routers: list[Router]
) -> None:
    """A pinned dispatch enqueued, then cancelled before any driver started its command: recall (HANDING_OFF ->
    WITHDRAWN) is journaled as its step; its command never runs."""
    r = _router(tmp_path, _lane(tmp_path, sleep=0), routers)
    dispatch_id = "feedface0002"
    r.journal.add_lane_dispatch(dispatch_id, SPEC, intent="train", lane="gcp", at=time.time())
    assert r.withdraw(dispatch_id) == []
    steps = r.journal.steps(dispatch_id)
    assert [(s.trigger, s.dest) for s in steps] == [("pin", "HANDING_OFF"), ("recall", "WITHDRAWN")]
    row = r.journal.dispatch(dispatch_id)
    assert row is not None
    assert (row.state, row.final, row.outcome) == ("WITHDRAWN", True, "withdrawn")
    r.adopt()
    r.poll()
    r.wait_for_handoffs()
    assert r.journal.handoff(dispatch_id) is None
    assert _ledger(tmp_path) == []
