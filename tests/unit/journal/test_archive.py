"""The archive of finished dispatches (journal/archive.py) and what reads it (journal/reads.py): a move keeps every
answer (history, status --all, spend and the budget's sums), a move cut between its copy and its delete (an
exception, or the process killed there) loses nothing and counts nothing twice, and the next move ends it."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import zoneinfo
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.budget import Windows
from fellows_fsm.core.paid import LIVE_PAID
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.compaction import Compaction
from fellows_fsm.driver.router import Router
from fellows_fsm.errors import ConfigError, JournalError
from fellows_fsm.journal.archive import archive_path, compact
from fellows_fsm.journal.check import check_due, mark_check_due
from fellows_fsm.journal.queries import read_spend
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock
from fellows_fsm.testing import FakePaidLane

DAY = 86_400.0
NOW = 1_796_040_000.0  # 2026-11-30 12:00 UTC, a Monday
UTC = zoneinfo.ZoneInfo("UTC")
BUDGET = BudgetConfig(paid_gpu_hours_per_day=1000, paid_cost_per_month=100_000, timezone="UTC")


def build(state_dir: Path, days: int = 40, per_day: int = 3, *, live: bool = True) -> dict[str, str]:
    """A journal written by the real Router on the fake port, over ``days`` days before NOW: each day a dispatch
    that starts on its first rung, one withdrawn by its user, and one pinned to a paid lane that runs and ends
    (succeeded); with ``live``, today one more that is still live, and one paid job still running. Returns how
    each ended."""
    clock = SimClock(NOW - days * DAY)
    gcp = CommandSettings(name="gcp", command=("true",), price_per_gpu_hour=3.0)
    lane = FakePaidLane(gcp, price_per_gpu_hour=3.0)
    config = Config(
        fellows=SlurmSettings(park_cap_seconds=60.0, poll_interval_seconds=10.0),
        lanes=(gcp,),
        router=RouterConfig(order=("fellows",)),
        state_dir=state_dir,
    )
    fake = FakeScheduler(clock)
    journal = Journal(config.journal_path)
    router = Router(config, fake, journal, clock=clock, lanes={"gcp": lane}).start()
    spec = JobSpec("train", "train.sbatch", gpus=2, time_limit_seconds=7200)
    ended: dict[str, str] = {}

    def settle() -> None:
        for _ in range(4):
            clock.advance_to(clock.now() + 10.0)
            router.poll()

    for day in range(days + 1):
        clock.advance_to(NOW - (days - day) * DAY)
        for _ in range(per_day if day < days else 1):
            started = router.dispatch(spec)
            assert started.slurm_job_id is not None
            fake.start(started.slurm_job_id)
            withdrawn = router.dispatch(spec)
            paid = router.dispatch(spec, pin="gcp")
            settle()
            router.withdraw(withdrawn.dispatch_id)
            lane.move(paid.dispatch_id, PaidStatus.RUNNING)
            settle()
            clock.advance_to(clock.now() + 1800.0)
            fake.end(started.slurm_job_id, exit_code=0)  # its job ends (followed to its end: issue 38)
            if day < days or not live:
                lane.move(paid.dispatch_id, PaidStatus.SUCCEEDED, "exit 0")
                ended[paid.dispatch_id] = "paid"
            settle()
            ended[started.dispatch_id] = "started"
            ended[withdrawn.dispatch_id] = "withdrawn"
    if live:
        router.dispatch(spec)  # live: never moved
    journal.close()
    return ended


def answers(path: Path) -> dict[str, Any]:
    """Everything a reader answers from the journal (and its archive): every dispatch's history, status --all's
    rows, the count, every paid run and spend's totals."""
    with Journal(path, readonly=True) as journal:
        rows = journal.dispatches()
        histories = {
            r.id: (
                r,
                journal.steps(r.id),
                journal.jobs(r.id),
                journal.handoff(r.id),
                journal.paid_run(r.id),
            )
            for r in rows
        }
        ends = journal.ends()
        spent = read_spend(journal, BUDGET, NOW)
        return {
            "ids": [r.id for r in rows],
            "histories": histories,
            "listings": journal.listings(),
            "count": journal.count(),
            "runs": journal.paid_runs(),
            "recent": [r.id for r in journal.recent(5)],
            "spend": spent,
            "sums": sorted(journal.paid_sums(Windows.at(NOW, UTC), NOW)),
            "ends": ends,
            "free": journal.free_sums(NOW - 60 * DAY),
        }


def in_journal(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return {r[0] for r in db.execute("SELECT id FROM dispatches")}


def in_archive(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(archive_path(path))) as db, db:
        return {r[0] for r in db.execute("SELECT id FROM dispatches")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    state = tmp_path_factory.mktemp("archive") / "state"
    return state, build(state)


@pytest.fixture
def journal_path(built: tuple[Path, dict[str, str]], tmp_path: Path) -> Path:
    """A fresh copy of the built journal (its WAL checkpointed into the file first)."""
    source = built[0] / "journal.sqlite3"
    with contextlib.closing(sqlite3.connect(source)) as db, db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    target = tmp_path / "state" / "journal.sqlite3"
    target.parent.mkdir()
    target.write_bytes(source.read_bytes())
    return target


def test_a_move_changes_no_answer(journal_path: Path, built: tuple[Path, dict[str, str]]) -> None:
    """Dispatches that ended over 14 days ago move to the archive; history, status --all, the count, the paid
    runs, spend and the budget's sums answer the same; the live ones and the recent ones stay."""
    before = answers(journal_path)
    done = compact(journal_path, before=NOW - 14 * DAY, now=NOW, batch=7)
    assert done is not None
    assert done.left == 0
    moved = in_archive(journal_path)
    assert len(moved) == done.moved > 50  # several batches of 7
    assert moved.isdisjoint(in_journal(journal_path))
    with Journal(journal_path, readonly=True) as journal:
        assert all(r.updated_at < NOW - 14 * DAY for r in journal.dispatches() if r.id in moved)
        assert {r.id for r in journal.dispatches(live_only=True)} <= in_journal(journal_path)
        assert any(r.updated_at >= NOW - 14 * DAY for r in journal.dispatches() if r.id not in moved)
        paid_moved = [run for run in journal.paid_runs() if run.dispatch_id in moved]
        assert paid_moved  # spend reads runs from the archive, not only from the journal
    assert answers(journal_path) == before
    assert before["spend"].month.total.runs > 0
    assert any(i in moved for i in before["ends"])  # free jobs' ends are read from the archive too (spend's free)
    assert before["free"]
    assert before["free"][0][1] > 0


def test_nothing_that_may_still_spend_moves(journal_path: Path) -> None:
    """A live dispatch, and a final one whose paid run may still spend or waits for its delete, stay."""
    with contextlib.closing(sqlite3.connect(journal_path)) as db, db:
        db.execute("UPDATE dispatches SET updated_at = ? ", (NOW - 100 * DAY,))
        run = db.execute("SELECT dispatch_id FROM paid_runs WHERE status='succeeded' LIMIT 1").fetchone()[0]
        db.execute("UPDATE paid_runs SET status='cancelling' WHERE dispatch_id=?", (run,))
        live = {r[0] for r in db.execute("SELECT id FROM dispatches WHERE final=0")}
        marks = ",".join("?" * len(LIVE_PAID))
        query = f"SELECT dispatch_id FROM paid_runs WHERE status IN ({marks})"
        spending = {r[0] for r in db.execute(query, sorted(LIVE_PAID))}
    compact(journal_path, before=NOW, now=NOW)
    assert live
    assert spending
    assert in_journal(journal_path) == live | spending


def test_a_move_cut_between_copy_and_delete_loses_nothing_and_counts_nothing_twice(journal_path: Path) -> None:
    """A failure after a batch was copied and before the journal's delete leaves those dispatches in both files:
    every reader reads each once (spend's totals unchanged), and the next compact ends the move."""
    before = answers(journal_path)
    cut: list[list[str]] = []

    def fail(ids: list[str]) -> None:
        cut.append(ids)
        raise RuntimeError("the machine went down here")

    with pytest.raises(RuntimeError):
        compact(journal_path, before=NOW - 14 * DAY, now=NOW, batch=10, between=fail)
    assert set(cut[0]) <= in_journal(journal_path) & in_archive(journal_path)
    with Journal(journal_path, readonly=True) as journal:
        assert journal.halfway() == journal.halfway(exact=True) == 10
    assert answers(journal_path) == before
    done = compact(journal_path, before=NOW - 14 * DAY, now=NOW)
    assert done is not None
    assert in_journal(journal_path).isdisjoint(in_archive(journal_path))
    assert answers(journal_path) == before
    with Journal(journal_path, readonly=True) as journal:
        assert journal.halfway() == journal.halfway(exact=True) == 0


def test_a_process_killed_in_the_middle_of_a_move_loses_nothing(journal_path: Path) -> None:
    """The compacting process is killed (SIGKILL) after its copy committed, before its delete: nothing is lost,
    nothing counted twice, and a compact after it ends the move."""
    before = answers(journal_path)
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from fellows_fsm.journal.archive import compact\n"
        "compact(Path(sys.argv[1]), before=float(sys.argv[2]), now=float(sys.argv[3]), batch=10,\n"
        "        between=lambda ids: os.kill(os.getpid(), signal.SIGKILL))\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code, str(journal_path), str(NOW - 14 * DAY), str(NOW)], check=False, timeout=120
    )
    assert killed.returncode == -9
    both = in_journal(journal_path) & in_archive(journal_path)
    assert len(both) == 10
    assert answers(journal_path) == before
    compact(journal_path, before=NOW - 14 * DAY, now=NOW)
    assert in_journal(journal_path).isdisjoint(in_archive(journal_path))
    assert answers(journal_path) == before


def test_a_journal_opened_before_the_archive_existed_reads_it(journal_path: Path) -> None:
    """A reader (a driver's budget, a follower) that opened the journal before the first move reads the archive
    from the first read after it: no paid run it counted disappears."""
    with Journal(journal_path) as journal:
        windows = Windows.at(NOW, UTC)
        sums = sorted(journal.paid_sums(windows, NOW))
        runs = journal.paid_runs()
        compact(journal_path, before=NOW - 2 * DAY, now=NOW)
        assert archive_path(journal_path).exists()
        assert sorted(journal.paid_sums(windows, NOW)) == sums
        assert journal.paid_runs() == runs


def test_the_driver_moves_a_batch_when_due(journal_path: Path) -> None:
    """The driver's compaction moves one batch at its first turn, one a turn while some are due, then nothing
    until its next due time."""
    clock = SimClock(NOW)
    compaction = Compaction(journal_path, 14.0, clock, batch=20)
    compaction.step()
    assert len(in_archive(journal_path)) == 20
    compaction.step()
    assert len(in_archive(journal_path)) == 40
    while compaction.due_at <= clock.now():
        compaction.step()
    settled = in_archive(journal_path)
    assert len(settled) > 40
    clock.advance_to(clock.now() + 3600.0)
    compaction.step()
    assert in_archive(journal_path) == settled


def test_keep_days_is_checked() -> None:
    """[journal] keep_days takes days of 0 or more; anything else is one line naming the value."""
    assert Config.from_mapping({"journal": {"keep_days": 3}}).journal.keep_days == 3.0
    assert Config.from_mapping({}).journal.keep_days == 14.0
    for bad in (-1, "7", True):
        with pytest.raises(ConfigError, match=r"\[journal\] keep_days=.* must be a number of days of 0 or more"):
            Config.from_mapping({"journal": {"keep_days": bad}})
    with pytest.raises(ConfigError, match="unknown key 'keep'"):
        Config.from_mapping({"journal": {"keep": 3}})


def test_history_of_an_archived_dispatch_through_the_command(tmp_path: Path) -> None:
    """`fellows-fsm journal compact` then `history ID` of a moved dispatch shows its steps as before; `journal
    check` reads both files; `status --all --json` lists every dispatch once. (Nothing live: no driver starts.)"""
    build(tmp_path / "state", days=30, per_day=1, live=False)
    journal_path = tmp_path / "state" / "journal.sqlite3"
    config = tmp_path / "fellows.toml"
    config.write_text(f'state_dir = "{journal_path.parent}"\n[journal]\nkeep_days = 14\n', encoding="utf-8")
    cli = [str(Path(sys.executable).with_name("fellows-fsm")), "--config", str(config)]
    env = {**os.environ, "FELLOWS_FSM_CONFIG": str(config)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120, check=False, env=env)

    with Journal(journal_path, readonly=True) as journal:
        oldest = journal.dispatches()[0].id
    history_before = run("history", oldest, "--json")
    assert history_before.returncode == 0, history_before.stderr
    listed_before = run("status", "--all", "--json")
    moved = run("journal", "compact", "--json")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["moved"] > 0
    assert oldest in in_archive(journal_path)
    history_after = run("history", oldest, "--json")
    assert history_after.returncode == 0, history_after.stderr
    assert history_after.stdout == history_before.stdout
    listed_after = run("status", "--all", "--json")
    ids = [d["dispatch_id"] for d in json.loads(listed_after.stdout)]
    assert len(ids) == len(set(ids)) == len(json.loads(listed_before.stdout))
    checked = run("journal", "check", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["dispatches"] == len(ids)


# --------------------------------------------------------------------------- the full check, only where it must
def _spoil_oldest(path: Path) -> str:
    """Make the oldest finished dispatch's label text that is not UTF-8 (what quick_check passes, status cannot
    read): a row no command reads."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        oldest = db.execute("SELECT id FROM dispatches WHERE final=1 ORDER BY created_at LIMIT 1").fetchone()[0]
        db.execute("UPDATE dispatches SET label = CAST(X'c328' AS TEXT) WHERE id=?", (oldest,))
    return str(oldest)


def test_opening_to_write_reads_what_commands_read_and_the_check_reads_everything(journal_path: Path) -> None:
    """A damaged row of an old finished dispatch does not stop a command (opening to write reads the live and
    the recent ones), but `journal check`'s full read finds it, and once a full disk marked the journal, opening
    to write reads every row and refuses it."""

    _spoil_oldest(journal_path)
    Journal(journal_path).close()  # a submit, a cancel: not refused for a row they never read
    with Journal(journal_path, readonly=True) as journal, pytest.raises(JournalError, match="unreadable or damaged"):
        journal.check_all()
    config = journal_path.parent.parent / "fellows.toml"
    config.write_text(f'state_dir = "{journal_path.parent}"\n', encoding="utf-8")
    checked = subprocess.run(
        [str(Path(sys.executable).with_name("fellows-fsm")), "--config", str(config), "journal", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 7, checked.stderr
    assert len(checked.stderr.strip().splitlines()) == 1
    assert f"journal {journal_path} is unreadable or damaged" in checked.stderr
    mark_check_due(journal_path)
    with pytest.raises(JournalError, match="unreadable or damaged"):
        Journal(journal_path)
    assert check_due(journal_path)  # still due: the next open reads every row again


def test_a_full_check_passed_clears_the_mark(journal_path: Path) -> None:
    """A full check that passes (a write-open after a full disk) removes the mark: the next open is cheap."""
    mark_check_due(journal_path)
    Journal(journal_path).close()
    assert not check_due(journal_path)


def test_a_driver_after_one_that_did_not_end_cleanly_reads_every_row(journal_path: Path) -> None:
    """The next driver after a driver that died holding the lock reads every row before it writes (a damaged one
    refuses it, the lock let go); after a driver that ended cleanly it does not."""
    with Journal(journal_path) as journal:
        journal.acquire_driver()  # released by close: ended cleanly
    _spoil_oldest(journal_path)
    with Journal(journal_path) as journal:
        journal.acquire_driver()  # the previous one ended cleanly: no full read
        assert journal.driving
        journal.release_driver()
    code = (
        "import os, sys\nfrom fellows_fsm.journal.store import Journal\n"
        "j = Journal(sys.argv[1]); j.acquire_driver(); os._exit(0)\n"  # dies holding the lock
    )
    subprocess.run([sys.executable, "-c", code, str(journal_path)], check=True, timeout=60)
    with Journal(journal_path) as journal:
        with pytest.raises(JournalError, match="unreadable or damaged"):
            journal.acquire_driver()
        assert not journal.driving
        assert not journal.driver_alive()


def test_nothing_due_makes_no_archive(journal_path: Path) -> None:
    """A move with nothing due (every dispatch ended within keep_days) makes no archive file: readers go on reading
    one file."""
    done = compact(journal_path, before=NOW - 365 * DAY, now=NOW)
    assert done is not None
    assert (done.moved, done.left) == (0, 0)
    assert not archive_path(journal_path).exists()


def test_a_writer_that_read_the_archive_never_holds_its_write_lock(journal_path: Path) -> None:
    """A driver's journal that attached the archive (its budget read the month) writes without taking the
    archive's write lock: a move copies to the archive while the driver is inside a write transaction."""
    compact(journal_path, before=NOW - 30 * DAY, now=NOW)  # the archive exists
    code = (
        "import sys\nfrom pathlib import Path\nfrom fellows_fsm.journal.archive import compact\n"
        "def stop(ids):\n    raise SystemExit(3)\n"
        "compact(Path(sys.argv[1]), before=float(sys.argv[2]), now=float(sys.argv[3]), batch=1, between=stop)\n"
    )
    with Journal(journal_path) as journal:
        journal.paid_sums(Windows.at(NOW, UTC), NOW)
        assert journal.archived()
        with journal.batch():
            journal.put_meta("held", 1)  # a write transaction of the journal is open
            copied = subprocess.run(
                [sys.executable, "-c", code, str(journal_path), str(NOW - 14 * DAY), str(NOW)],
                check=False,
                timeout=25,
                capture_output=True,
                text=True,
            )
    assert copied.returncode == 3, copied.stderr  # its copy committed while the write transaction was open
    with Journal(journal_path, readonly=True) as journal:
        assert journal.halfway() == 1
