"""Two `fellows-fsm submit` processes on one journal, as two shells run them, against the real local SLURM.

Both only follow: the journal's background driver (started by one of them) walks both dispatches; when the driver
dies (here: SIGKILL mid-rung), the next follower read starts a new one. After each, ``assert_settled`` checks that
every dispatch has exactly one job that ran (or one handoff) and that nothing is left pending.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fellows_fsm.journal.lock import DriverOwner
from fellows_fsm.journal.store import Journal

from .cli_harness import FELLOWS_FSM, cli
from .conftest import Cluster
from .settled import assert_settled
from .test_cli_real import _config

pytestmark = pytest.mark.slurm

RUNNING_LINE = re.compile(r"^dispatch ([0-9a-f]{12}) is RUNNING on (\S+) as SLURM job (\d+)$", re.MULTILINE)
STARTED_NOTE = "started the background driver"


def _start_submit(config: Path, slurm: Cluster) -> subprocess.Popen[str]:
    """`fellows-fsm submit` of an 8-GPU, 10-minute sleeping job, in the foreground (its default follow mode)."""
    argv = [str(FELLOWS_FSM), "--config", str(config), "submit", "--gpus", "8", "--time", "10:00"]
    argv += [slurm.script(300), "--", *slurm.job_args()]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _status(config: Path) -> list[dict[str, Any]]:
    result = cli(config, "status", "--json", timeout=60)
    return json.loads(result.stdout) if result.returncode == 0 else []


@contextmanager
def _journal(config: Path) -> Iterator[Journal]:
    """The journal of ``config``, opened read-only (never the driver lock)."""
    journal = Journal(config.parent / "state" / "journal.sqlite3", readonly=True)
    try:
        yield journal
    finally:
        journal.close()


def _own_dispatch(out: str) -> tuple[str, str]:
    """The dispatch id and QoS of the one RUNNING summary line a submit printed last."""
    [(dispatch_id, qos, _job)] = RUNNING_LINE.findall(out)
    assert out.strip().splitlines()[-1].startswith(f"dispatch {dispatch_id} is RUNNING"), out[-2000:]
    return dispatch_id, qos


def test_two_submits_at_once_both_run_each_following_its_own(slurm: Cluster, tmp_path: Path) -> None:
    """Two submits started together on a full high-eur: one of them starts the background driver, which walks
    both; each prints its own walk to normal-eur and exits 0 with its dispatch RUNNING."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path, cap=4.0)
    procs = [_start_submit(config, slurm), _start_submit(config, slurm)]
    outputs = [proc.communicate(timeout=180) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, f"exit {proc.returncode}: {out[-2000:]}{err}"
    mine = [_own_dispatch(out) for out, _ in outputs]
    assert [qos for _, qos in mine] == ["normal-eur", "normal-eur"]
    ids = [dispatch_id for dispatch_id, _ in mine]
    assert len(set(ids)) == 2
    for (out, _), own, other in zip(outputs, ids, ids[::-1], strict=True):
        # Each live view is its own dispatch's: its panel and every step of its walk, never the other's id.
        assert f"dispatch {own}" in out
        assert other not in out
        for step in ("submit", "park", "cancel", "resubmit", "start"):
            assert re.search(rf"\b{step}\b", out), f"no {step} step in the view of {own}:\n{out[-3000:]}"
    starters = [err for _, err in outputs if STARTED_NOTE in err]  # was: one drove and one followed
    assert len(starters) == 1, [err for _, err in outputs]
    with _journal(config) as journal:
        for dispatch_id in ids:
            assert [s.trigger for s in journal.steps(dispatch_id)] == ["submit", "park", "cancel", "resubmit", "start"]
        assert_settled(slurm, journal, tmp_path, ids)


def test_the_follower_takes_over_when_the_driver_is_killed_mid_rung(slurm: Cluster, tmp_path: Path) -> None:
    """Two submits at once; the background driver is SIGKILLed while both pend on high-eur: a follower starts a
    new driver, which walks both dispatches to normal-eur; both submits exit 0."""
    slurm.occupy("high-eur", 8, count=2)
    config = _config(tmp_path, cap=12.0)
    procs = {proc.pid: proc for proc in (_start_submit(config, slurm), _start_submit(config, slurm))}
    lock = config.parent / "state" / "journal.sqlite3.lock"
    rows: list[dict[str, Any]] = []
    try:

        def both_pending_on_high_eur() -> bool:
            rows[:] = _status(config)
            return len(rows) == 2 and all(r["slurm_job_id"] and r["state"] == "SUBMITTED(high-eur)" for r in rows)

        slurm.wait_for(both_pending_on_high_eur, "both dispatches to be queued on high-eur", timeout=40, tick=0.3)
        owner = DriverOwner.parse(lock.read_text())
        assert owner is not None
        assert owner.kind == "background"
        assert owner.pid not in procs, "a submit drove the journal itself"
        for row in rows:
            assert slurm.row(row["slurm_job_id"]).state == "PENDING"
        os.kill(owner.pid, signal.SIGKILL)
    except BaseException:
        for proc in procs.values():
            proc.kill()
            proc.communicate(timeout=30)
        raise
    outputs = [proc.communicate(timeout=180) for proc in procs.values()]
    for proc, (out, err) in zip(procs.values(), outputs, strict=True):
        assert proc.returncode == 0, f"exit {proc.returncode}: {out[-2000:]}{err}"
    assert sum(err.count(STARTED_NOTE) for _, err in outputs) == 2  # the first driver, and its successor
    new_owner = DriverOwner.parse(lock.read_text())
    assert new_owner is not None
    assert new_owner.pid != owner.pid
    ids = [row["dispatch_id"] for row in rows]
    for out, _ in outputs:
        own, qos = _own_dispatch(out)
        assert qos == "normal-eur"
        assert own in ids
    after = {row["dispatch_id"]: row for row in _status(config)}
    assert {(after[i]["state"], after[i]["qos"], after[i]["final"]) for i in ids} == {("RUNNING", "normal-eur", False)}
    with _journal(config) as journal:
        for dispatch_id in ids:
            # A successor that started late journals the time nobody watched as a pause and a resume.
            triggers = [s.trigger for s in journal.steps(dispatch_id) if s.trigger not in ("pause", "resume")]
            assert triggers == ["submit", "park", "cancel", "resubmit", "start"], (dispatch_id, triggers)
        assert_settled(slurm, journal, tmp_path, ids)
