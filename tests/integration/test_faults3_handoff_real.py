"""The third round of faults on the real local SLURM, around the paid handoff: a driver and the lane's wrapper
killed with SIGKILL while the gcp command runs, and a state dir on a full filesystem (a real tmpfs in this test's
own mount namespace, filled with a file).

After each, the promise of ``assert_settled``: one job that ran or one paid handoff, never two, and nothing of the
dispatch left pending; a handoff whose fate no one can know is said so, never run again and never called failed.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.journal.lock import lock_held
from tests.processes import processes_with

from .cli_harness import cli, driver_pid, ledger_config, read_journal, submit_args
from .conftest import Cluster
from .settled import assert_settled, handoff_files, jobs_of, ledger

pytestmark = pytest.mark.slurm

SLEEP = 6
"""The gcp command sleeps this long before it makes the paid job (appends to the ledger)."""


def _config(tmp_path: Path, *, cap: float = 2.0, probe: bool = False) -> Path:
    """Short caps, a 0.5 s poll, and a gcp lane that sleeps SLEEP s, then appends the dispatch id to the ledger."""
    book = tmp_path / "gcp.ledger"
    code = f'sleep {SLEEP}; echo "$1" >> {book}'
    lane = f"command = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n"
    if probe:
        lane += f"probe = {json.dumps(['grep', '-qx', '{dispatch_id}', str(book)])}\n"
    return ledger_config(tmp_path, cap=cap, poll=0.5, park_early="off", router="driver_idle_seconds = 5\n", lane=lane)


def _fill_node(slurm: Cluster) -> None:
    """The node's 64 GPUs all busy with this user's other jobs: no rung can start an 8-GPU job."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 8, count=4)


def _command_runs(book: str) -> bool:
    """Is the gcp command itself (its sh, past the wrapper whose command line also names the ledger) running?"""
    return any(p.split(": ", 1)[1].startswith("sh -c") for p in processes_with(book))


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's stderr, checked to be one line and no traceback."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# --------------------------------------------------------------------------- 2: killed while the lane's command runs
@pytest.mark.parametrize("probe", [False, True], ids=["no-probe", "probe"])
def test_a_driver_and_wrapper_killed_mid_handoff_never_pay_twice(slurm: Cluster, tmp_path: Path, probe: bool) -> None:
    """kill -9 of the driver and of the lane's wrapper while the gcp command sleeps: the next driver never starts
    it again (one ledger line, ever); with no probe the dispatch ends HANDOFF_UNKNOWN (exit 10) saying what to
    check, with a probe that finds the paid job it ends HANDED_OFF (exit 0)."""
    _fill_node(slurm)
    config = _config(tmp_path, probe=probe)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    book = str(tmp_path / "gcp.ledger")

    def command_runs() -> bool:
        with read_journal(tmp_path) as journal:
            row = journal.handoff(dispatch_id)
        return row is not None and row.pid is not None and _command_runs(book)

    slurm.wait_for(command_runs, "the gcp command to run", timeout=60)
    with read_journal(tmp_path) as journal:
        handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert handoff.pid is not None
    os.kill(driver_pid(tmp_path), signal.SIGKILL)
    os.kill(handoff.pid, signal.SIGKILL)  # the wrapper: it can write no exit status now
    watched = cli(config, "watch", "--json", timeout=120)  # the next driver, followed to the end
    slurm.wait_for(lambda: not processes_with(book), "the gcp command to end", timeout=30)
    time.sleep(SLEEP)  # long past the command's sleep: a second run would have written by now
    assert ledger(tmp_path) == [dispatch_id]
    [done] = json.loads(watched.stdout)
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        if probe:
            assert watched.returncode == 0, watched.stderr
            assert (row.state, done["outcome"]) == ("HANDED_OFF", "handed-off")
            assert handoff_files(tmp_path, dispatch_id) == []  # its end is journaled: nothing else needs them
        else:
            assert watched.returncode == 10, watched.stderr
            assert (row.state, done["outcome"]) == ("HANDOFF_UNKNOWN", "handoff-unknown")
            assert "check gcp for a job of dispatch" in watched.stderr
            assert handoff_files(tmp_path, dispatch_id) == [f"{dispatch_id}.err", f"{dispatch_id}.out"]  # (read)
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
    again = cli(config, "watch", "--json")  # a later driver leaves it alone: never re-run, never failed
    assert again.returncode == 0, again.stderr
    time.sleep(SLEEP + 1)
    assert ledger(tmp_path) == [dispatch_id]


# --------------------------------------------------------------------------- issue 36 item 12: a lost command, followed
def _followed_config(tmp_path: Path) -> Path:
    """The SLEEP-then-ledger gcp lane, with a ``status`` that prints the word the test writes in paid-<id>.state
    (exit 1, could not tell, while there is none) and a ``cancel`` that appends the dispatch id to cancels."""
    book, states, cancels = tmp_path / "gcp.ledger", tmp_path / "paid-", tmp_path / "cancels"
    code = f'sleep {SLEEP}; echo "$1" >> {book}'
    lane = f"command = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n"
    lane += f"status = {json.dumps(['sh', '-c', f'cat {states}$1.state', 'sh', '{dispatch_id}'])}\n"
    lane += f"cancel = {json.dumps(['sh', '-c', f'echo $1 >> {cancels}', 'sh', '{dispatch_id}'])}\n"
    return ledger_config(tmp_path, cap=2.0, poll=0.5, park_early="off", router="driver_idle_seconds = 5\n", lane=lane)


def _state(tmp_path: Path, dispatch_id: str) -> str | None:
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
    return None if row is None else row.state


@pytest.mark.parametrize("end", ["succeeded", "cancel"])
def test_a_lost_command_on_a_lane_with_status_is_followed_by_it_to_its_end(
    slurm: Cluster, tmp_path: Path, end: str
) -> None:
    """kill -9 of the driver and of the lane's wrapper while the gcp command (a lane WITH status) sleeps: the next
    driver never runs it again, and follows it by its status (PAID_UNKNOWN, counted at its worst case): found running
    then succeeded, it ends PAID_DONE counted from the command's start (not at its worst case); or ``cancel`` deletes
    it while its status cannot tell (WITHDRAWN, the lane's cancel run once)."""
    _fill_node(slurm)
    config = _followed_config(tmp_path)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    book = str(tmp_path / "gcp.ledger")

    def command_runs() -> bool:
        with read_journal(tmp_path) as journal:
            row = journal.handoff(dispatch_id)
        return row is not None and row.pid is not None and _command_runs(book)

    slurm.wait_for(command_runs, "the gcp command to run", timeout=60)
    with read_journal(tmp_path) as journal:
        handoff = journal.handoff(dispatch_id)
    assert handoff is not None
    assert handoff.pid is not None
    os.kill(driver_pid(tmp_path), signal.SIGKILL)
    os.kill(handoff.pid, signal.SIGKILL)  # the wrapper: it can write no exit status now
    status = cli(config, "status", dispatch_id)  # starts the next driver
    assert status.returncode == 0, status.stderr
    slurm.wait_for(lambda: _state(tmp_path, dispatch_id) == "PAID_UNKNOWN", "PAID_UNKNOWN", timeout=60, tick=0.25)
    with read_journal(tmp_path) as journal:
        run = journal.paid_run(dispatch_id)
        assert run is not None
        assert run.live  # counted at its worst case while its status cannot tell
        assert run.committed_gpu_hours(time.time()) == pytest.approx(8 * 600 / 3600)
    state = tmp_path / f"paid-{dispatch_id}.state"
    if end == "succeeded":
        state.write_text("running\n", encoding="utf-8")
        slurm.wait_for(lambda: _state(tmp_path, dispatch_id) == "PAID_RUNNING", "PAID_RUNNING", timeout=30, tick=0.25)
        state.write_text("succeeded\n", encoding="utf-8")
        slurm.wait_for(lambda: _state(tmp_path, dispatch_id) == "PAID_DONE", "PAID_DONE", timeout=30, tick=0.25)
    else:  # cancelled while its status still cannot tell
        cancelled = cli(config, "cancel", dispatch_id)
        assert cancelled.returncode == 0, cancelled.stderr
        cancels = tmp_path / "cancels"
        slurm.wait_for(cancels.exists, "the lane's cancel", timeout=30, tick=0.25)
        assert cancels.read_text(encoding="utf-8").split() == [dispatch_id]
    slurm.wait_for(lambda: not processes_with(book), "the gcp command to end", timeout=30)
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        run = journal.paid_run(dispatch_id)
        triggers = [str(s.trigger) for s in journal.steps(dispatch_id)]
        assert row is not None
        assert run is not None
        assert "paid_unknown" in triggers
        assert "handoff_unknown" not in triggers
        if end == "succeeded":
            assert (row.state, row.outcome, run.status) == ("PAID_DONE", "paid-succeeded", "succeeded")
            assert not run.live
            assert run.gpu_hours(time.time()) < 8 * 600 / 3600  # as it ran, not its worst case
            assert run.ended_at is not None
            assert run.gpu_hours(time.time()) == pytest.approx(8 * (run.ended_at - handoff.started_at) / 3600, rel=0.05)
            assert_settled(slurm, journal, tmp_path, [dispatch_id])
        else:  # withdrawn after its one handoff (which assert_settled does not expect): settled by hand
            assert (row.state, row.outcome) == ("WITHDRAWN", "withdrawn")
            assert [j for j in jobs_of(slurm, dispatch_id) if j.ever_ran or j.state == "PENDING"] == []
    assert ledger(tmp_path) == [dispatch_id]  # never run again
    # Its job's values are needed no more; a lost command's output is kept (what it printed, to read).
    assert handoff_files(tmp_path, dispatch_id) == [f"{dispatch_id}.err", f"{dispatch_id}.out"]


# --------------------------------------------------------------------------- 8: a full disk
_libc = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(where: Path, size: str) -> None:
    """Mount a tmpfs of ``size`` at ``where``, in a mount namespace of this process's own (never the host's)."""
    if _libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        pytest.fail(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    _libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE: nothing leaks out
    where.mkdir(parents=True, exist_ok=True)
    if _libc.mount(b"tmpfs", str(where).encode(), b"tmpfs", 0, f"size={size}".encode()) != 0:
        pytest.fail(f"mount tmpfs at {where}: {os.strerror(ctypes.get_errno())}")


@pytest.fixture
def small_state_dir(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/state on a 16 MB tmpfs of its own; unmounted after."""
    state = tmp_path / "state"
    _mount_tmpfs(state, "16m")
    yield state
    _libc.umount2(str(state).encode(), 2)  # MNT_DETACH


def _fill(directory: Path) -> Path:
    """Write a file in ``directory`` until its filesystem has no byte left; return the file."""
    filler = directory / "filler"
    block = b"\0" * 4096
    with open(filler, "wb", buffering=0) as f:
        while (written := _write(f.fileno(), block)) > 0:
            pass
    assert written == -errno.ENOSPC, written
    return filler


def _write(fd: int, data: bytes) -> int:
    """os.write, or minus the errno it failed with."""
    try:
        return os.write(fd, data)
    except OSError as exc:
        return -(exc.errno or 1)


def _drivers(state: Path) -> list[str]:
    return [p for p in processes_with("fellows_fsm.driver.process") if str(state) in p]


def test_a_full_state_dir_is_one_line_and_the_first_command_after_space_returns_drives(
    slurm: Cluster, tmp_path: Path, small_state_dir: Path
) -> None:
    """The state dir's filesystem filled while a dispatch waits on a rung: every command says so in one line (exit
    7; status still lists), no driver is started that cannot journal, nothing is queued; once space is freed the
    first submit drives again, and each dispatch ends with exactly one paid handoff."""
    _fill_node(slurm)
    config = _config(tmp_path, cap=6.0)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    filler = _fill(small_state_dir)
    lock = small_state_dir / "journal.sqlite3.lock"
    slurm.wait_for(lambda: not lock_held(lock), "the driver to stop on the full disk", timeout=30)
    stopped = driver_pid(tmp_path)  # the last driver's record: a driver started later would write its own
    queued = {r.job_id for r in slurm.queue()}
    for args, code in ((submit_args(slurm, "--detach"), 7), (["status"], 0), (["watch", "--once"], 7)):
        done = cli(config, *args, timeout=60)  # status still shows the table: a driver it cannot start is a warning
        assert done.returncode == code, (args, done.stdout, done.stderr)
        line = _one_line(done)
        assert f"the state dir {small_state_dir} is full (" in line, line
    # No NEW job: squeue -t all also drops jobs that ended more than MinJobAge (300 s) ago, such as the earlier
    # tests' (in the whole suite twenty were purged between the two reads), so the queue may only shrink.
    assert {r.job_id for r in slurm.queue()} <= queued  # nothing queued that could not be journaled
    assert driver_pid(tmp_path) == stopped  # no driver was started only to die on the full disk
    assert _drivers(small_state_dir) == []
    assert ledger(tmp_path) == []
    filler.unlink()
    again = cli(config, *submit_args(slurm, "--detach"))  # the first command after space returns drives
    assert again.returncode == 0, again.stderr
    second = again.stdout.strip()
    watched = cli(config, "watch", "--json", timeout=180)
    assert watched.returncode == 0, watched.stderr
    ended = {row["dispatch_id"]: row["outcome"] for row in json.loads(watched.stdout)}
    assert ended == {dispatch_id: "handed-off", second: "handed-off"}
    assert sorted(ledger(tmp_path)) == sorted([dispatch_id, second])
    with read_journal(tmp_path) as journal:
        assert_settled(slurm, journal, tmp_path, [dispatch_id, second])


def test_a_disk_filled_while_the_lane_command_runs_never_pays_twice(
    slurm: Cluster, tmp_path: Path, small_state_dir: Path
) -> None:
    """The state dir's filesystem filled while the gcp command sleeps: the driver stops, no later command starts it
    again, and once space is freed the next driver records its exit status: one paid handoff, HANDED_OFF."""
    _fill_node(slurm)
    config = _config(tmp_path)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    book = str(tmp_path / "gcp.ledger")
    slurm.wait_for(lambda: _command_runs(book), "the gcp command to run", timeout=60)
    filler = _fill(small_state_dir)
    slurm.wait_for(lambda: not processes_with(book), "the gcp command to end", timeout=30)
    for _ in range(3):  # each of these used to start a driver that ran the command again
        done = cli(config, "watch", "--once", timeout=60)
        assert done.returncode == 7, done.stderr
        assert "full" in _one_line(done)
    time.sleep(SLEEP + 1)
    assert ledger(tmp_path) == [dispatch_id]
    filler.unlink()
    watched = cli(config, "watch", timeout=120)  # the first command after space returns: the status is recorded
    assert watched.returncode == 0, watched.stderr
    time.sleep(SLEEP + 1)
    assert ledger(tmp_path) == [dispatch_id]
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert (row.state, row.outcome) == ("HANDED_OFF", "handed-off")
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
