"""The archive of finished dispatches on the real local SLURM (issue 40, item 3): a move killed between its copy and
its delete, then `fellows-fsm journal compact` while a driver drives the journal and `status` reads it, in
processes of their own. Nothing is lost, nothing counted twice: `spend` adds up the same, `history ID` of a moved
dispatch shows the same steps, every reader lists each dispatch once, and the driver walks on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import load_config
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.journal.archive import archive_path
from fellows_fsm.journal.lock import lock_held
from fellows_fsm.journal.store import Journal
from fellows_fsm.testing import FakePaidLane

from .cli_harness import cli, json_of, ledger_config, submit_args
from .conftest import Cluster

pytestmark = pytest.mark.slurm

FELLOWS_FSM = str(Path(sys.executable).with_name("fellows-fsm"))
KILLED_MOVE = (
    "import os, signal, sys, time\n"
    "from pathlib import Path\n"
    "from fellows_fsm.journal.archive import compact\n"
    "die = lambda ids: os.kill(os.getpid(), signal.SIGKILL)\n"
    "compact(Path(sys.argv[1]), before=time.time(), batch=1, between=die)\n"
)


def tallies(spend: dict[str, Any]) -> dict[str, Any]:
    """What spend counted (its windows' tallies), without the time it was asked at."""
    return {key: spend[key] for key in ("day", "week", "month")}


def ids_in(path: Path, *, archive: bool = False) -> set[str]:
    """The dispatch ids in the journal (or its archive), read straight from the file."""
    with contextlib.closing(sqlite3.connect(archive_path(path) if archive else path)) as db, db:
        return {r[0] for r in db.execute("SELECT id FROM dispatches")}


def test_a_compaction_killed_then_run_beside_a_driver_and_readers_changes_no_answer(
    slurm: Cluster, tmp_path: Path
) -> None:
    """Three dispatches walk their one rung (high-eur, full), are handed to the paid lane, run and end; a
    fourth's paid job stays queued at its lane (live: never moved). A move killed (SIGKILL) after its copy leaves
    one dispatch in both files: spend, status and history answer as before. Then `journal compact --keep-days 0`
    runs while this process drives the journal (polling) and a loop of `status --all --json` reads it: it moves
    the three, every status listed four dispatches once, spend and history of a moved one are unchanged, `journal
    check` reads both files whole, and the live dispatch is walked to its end afterwards."""
    slurm.occupy("high-eur", 8, count=2)
    path = ledger_config(tmp_path, cap=2.0, poll=0.5, fellows="qos_ladder = []\n")
    config = load_config(path)
    gcp = config.lane_named("gcp")
    assert gcp is not None
    lane = FakePaidLane(gcp, price_per_gpu_hour=2.5)
    journal_path = tmp_path / "state" / "journal.sqlite3"
    with Fellows(config, lanes={"gcp": lane}) as fellows:
        ids = [fellows.submit(slurm.spec(time_limit=3600)).dispatch_id for _ in range(4)]

        def until(state: str, dispatch_id: str) -> None:
            """This process drives (one poll each half second) until the dispatch is in ``state``."""
            deadline = time.monotonic() + 60
            while fellows.handle(dispatch_id).state != state and time.monotonic() < deadline:
                fellows.poll()
                time.sleep(0.5)
            assert fellows.handle(dispatch_id).state == state

        for d in ids:
            until("PAID_QUEUED", d)
        for d in ids[:3]:
            lane.move(d, PaidStatus.RUNNING)
            until("PAID_RUNNING", d)
            lane.move(d, PaidStatus.SUCCEEDED, "exit 0")
            until("PAID_DONE", d)
        # ids[3] stays queued at its lane (live: its worst case counts, the same at every look)
        spend_before = tallies(json_of(cli(path, "spend", "--json", timeout=60)))
        assert spend_before["day"]["total"]["runs"] == 4
        history_before = cli(path, "history", ids[0], "--json", timeout=60)
        assert history_before.returncode == 0, history_before.stderr

        killed = subprocess.run([sys.executable, "-c", KILLED_MOVE, str(journal_path)], check=False, timeout=120)
        assert killed.returncode == -signal.SIGKILL
        halfway = ids_in(journal_path) & ids_in(journal_path, archive=True)
        assert len(halfway) == 1  # copied, not yet deleted
        assert tallies(json_of(cli(path, "spend", "--json", timeout=60))) == spend_before
        listed = [d["dispatch_id"] for d in json_of(cli(path, "status", "--all", "--json", timeout=60))]
        assert sorted(listed) == sorted(ids)

        readers = subprocess.Popen(
            [
                "bash",
                "-c",
                f'for i in $(seq 15); do "{FELLOWS_FSM}" --config "{path}" status --all --json'
                ' > "$0/status.$i.json" || exit 1; done',
                str(tmp_path),
            ],
            env={**os.environ, "COLUMNS": "200"},
        )
        compacting = subprocess.Popen(
            [FELLOWS_FSM, "--config", str(path), "journal", "compact", "--keep-days", "0", "--json"],
            stdout=subprocess.PIPE,
            text=True,
        )
        while compacting.poll() is None or readers.poll() is None:
            fellows.poll()  # this process drives the journal all the while
            time.sleep(0.2)
        out, _ = compacting.communicate(timeout=60)
        assert compacting.returncode == 0
        assert readers.returncode == 0
        moved = json.loads(out)
        assert moved["left"] == 0
        assert ids_in(journal_path) == {ids[3]}  # the live one stays
        assert ids_in(journal_path, archive=True) == set(ids[:3])
        for i in range(1, 16):
            seen = [d["dispatch_id"] for d in json.loads((tmp_path / f"status.{i}.json").read_text())]
            assert sorted(seen) == sorted(ids), i  # each once, before, during and after the move

        assert tallies(json_of(cli(path, "spend", "--json", timeout=60))) == spend_before
        history_after = cli(path, "history", ids[0], "--json", timeout=60)
        assert history_after.returncode == 0, history_after.stderr
        assert history_after.stdout == history_before.stdout
        checked = json_of(cli(path, "journal", "check", "--json", timeout=60))
        assert (checked["dispatches"], checked["moved_halfway"]) == (4, 0)

        lane.move(ids[3], PaidStatus.RUNNING)
        until("PAID_RUNNING", ids[3])  # the driver walks on after the move
        lane.move(ids[3], PaidStatus.SUCCEEDED, "exit 0")
        until("PAID_DONE", ids[3])
    with Journal(journal_path, readonly=True) as journal:
        assert [r.state for r in journal.dispatches()] == ["PAID_DONE"] * 4


def test_the_background_driver_moves_what_ended_before_keep_days_itself(slurm: Cluster, tmp_path: Path) -> None:
    """With `[journal] keep_days = 0`, a background driver started by a later submit moves the dispatch that ran
    before it (ENDED: its job was followed to its end) to the archive after its first poll, with no `journal
    compact`: `history` and `status --all` still show it, and the live dispatch stays in the journal."""
    path = ledger_config(
        tmp_path,
        cap=30.0,
        poll=0.5,
        router="driver_idle_seconds = 1\nfollow_interval_seconds = 0.5\n",
        lanes=False,
        fellows="qos_ladder = []\n",
    )
    path.write_text(path.read_text(encoding="utf-8") + "\n[journal]\nkeep_days = 0\n", encoding="utf-8")
    first = cli(path, "submit", "--json", "--gpus", "1", "--time", "10:00", slurm.script(1), "--", *slurm.job_args())
    ran = json_of(first)
    assert ran["state"] == "RUNNING"
    journal_path = tmp_path / "state" / "journal.sqlite3"
    deadline = time.monotonic() + 60
    while lock_held(journal_path.with_name("journal.sqlite3.lock")) and time.monotonic() < deadline:
        time.sleep(0.2)  # the driver records the job's end, then idles out (1 s): the next submit starts another
    assert not lock_held(journal_path.with_name("journal.sqlite3.lock"))
    history_before = cli(path, "history", ran["dispatch_id"], "--json")
    assert history_before.returncode == 0, history_before.stderr
    assert json_of(history_before)[-1]["to"] == "ENDED"
    assert not archive_path(journal_path).exists()
    slurm.occupy("high-eur", 8, count=2)  # (the first job slept 1 s) the next dispatch stays pending: live
    second = cli(path, *submit_args(slurm, "--detach"))
    assert second.returncode == 0, second.stderr
    live = second.stdout.strip()
    deadline = time.monotonic() + 30
    while ran["dispatch_id"] not in (ids_in(journal_path, archive=True) if archive_path(journal_path).exists() else ()):
        assert time.monotonic() < deadline, "the driver did not move the finished dispatch"
        time.sleep(0.2)
    assert ids_in(journal_path) == {live}
    history_after = cli(path, "history", ran["dispatch_id"], "--json")
    assert history_after.stdout == history_before.stdout
    listed = [d["dispatch_id"] for d in json_of(cli(path, "status", "--all", "--json"))]
    assert sorted(listed) == sorted([ran["dispatch_id"], live])
    assert cli(path, "cancel", live).returncode == 0  # the driver that moved it walks on
