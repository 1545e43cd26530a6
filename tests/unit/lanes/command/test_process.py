"""The lane command's process (lanes/command/process.py: the wrapper): a lane command that fails leaves nothing behind
(its group and every descendant ended before the failure is recorded); one that succeeds may leave its own daemon."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from fellows_fsm.lanes.command.config import LaneConfig
from fellows_fsm.lanes.command.lane import CommandLane
from fellows_fsm.lanes.handoff import HandoffFiles, HandoffResult
from fellows_fsm.scheduler.port import JobSpec
from tests.processes import processes_with


def _run_to_end(command: tuple[str, ...], tmp_path: Path, *, timeout: float = 60) -> HandoffResult:
    """Start ``command`` as a lane's handoff and look at it until it has a result."""
    lane = CommandLane(LaneConfig(name="gcp", command=command, timeout_seconds=timeout))
    spec = JobSpec(name="train", script="train.sbatch", gpus=8)
    handoff = lane.start("abc123", spec, HandoffFiles(tmp_path / "handoffs", "abc123"), now=time.time())
    while (result := handoff.result(time.time())) is None:
        time.sleep(0.02)
    return result


# Each forks a child that would "create the paid job" 60 s later (one in the group, one that left it with setsid),
# then fails: a non-zero exit, a signal, or hanging until the timeout. 60 s: far past any cleanup, even on a loaded
# machine (with 8 s a slow cleanup let the child write first, and the test read a late kill as a survivor).
FAILURES = {
    "exit 3": ("exit 3", 60.0, 3),
    "killed by a signal": ("kill -9 $$", 60.0, -9),
    "timed out": ("sleep 100", 1.0, 124),
}


@pytest.mark.parametrize("how", list(FAILURES), ids=list(FAILURES))
def test_a_failed_handoff_leaves_no_process_that_could_still_pay(tmp_path: Path, how: str) -> None:
    """After a lane command fails, no process it started is left (not even one in a new session, or one that
    ignores SIGTERM), so the job it meant to create never appears."""
    tail, timeout, status = FAILURES[how]
    marker = tmp_path / f"paid-{uuid.uuid4().hex}"
    late = f"trap '' TERM; sleep 60; echo paid >> {marker}"
    code = f'(sleep 60; echo paid >> {marker}) & setsid sh -c "{late}" & {tail}'
    result = _run_to_end(("sh", "-c", code), tmp_path, timeout=timeout)
    assert result.exit_status == status
    assert processes_with(str(marker)) == []  # nothing is left that could write the marker later
    assert not marker.exists()


def test_a_successful_handoff_may_leave_its_own_daemon(tmp_path: Path) -> None:
    """A command that exits 0 has handed the job over: a daemon it left (``--async`` work) is not killed."""
    tag = uuid.uuid4().hex
    code = f"setsid sh -c 'sleep 30 # {tag}' </dev/null >/dev/null 2>&1 & exit 0"
    result = _run_to_end(("sh", "-c", code), tmp_path)
    assert result.ok
    left = processes_with(tag)
    settled = time.monotonic() + 5.0
    while len(left) > 1 and time.monotonic() < settled:  # the daemon's fork for sleep shows sh's argv until it execs
        time.sleep(0.05)
        left = processes_with(tag)
    assert len(left) == 1, left
    os.kill(int(left[0].split(":")[0]), 9)


@pytest.mark.parametrize(
    ("keep_output", "keep_job", "left"),
    [(False, False, []), (True, False, [".err", ".out"]), (False, True, [".job.json"])],
    ids=["all", "a-lost-command", "a-followed-job"],
)
def test_a_handoffs_files_are_removed_but_what_is_still_needed(
    tmp_path: Path, keep_output: bool, keep_job: bool, left: list[str]
) -> None:
    """``HandoffFiles.remove`` removes every file of the handoff but its output (a lost command) or its job's
    values (a paid job still followed), and nothing of another dispatch."""
    files, other = HandoffFiles(tmp_path, "d1"), HandoffFiles(tmp_path, "d2")
    for f in (files, other):
        f.prepare()
        f.status.write_text("0")
        f.job.write_text("{}")
    files.remove(keep_output=keep_output, keep_job=keep_job)
    assert sorted(p.name for p in tmp_path.glob("d1.*")) == [f"d1{suffix}" for suffix in left]
    assert len(list(tmp_path.glob("d2.*"))) == 5
