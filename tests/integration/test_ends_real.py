"""Every job followed to its end on the real local SLURM (issue 38), through the command line as a user runs it:
exit 0, exit 3, over its --time, scancelled from outside, requeued while it runs, an end while slurmdbd is stopped
and the driver killed across it; `wait` and `submit --wait` exit codes; `spend`'s free GPU-hours.

One cluster serves several jobs at once (each case's job runs beside the others), so the cases share two tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .cli_harness import cli, json_of, ledger_config, read_journal, stop_background_driver
from .conftest import RUNTIME, Cluster

pytestmark = pytest.mark.slurm

PRICE = 2.5


@pytest.fixture
def no_driver_left(tmp_path: Path) -> Iterator[None]:
    """The background driver the test's commands started is stopped after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def _config(tmp_path: Path) -> Path:
    """1 s polls and follows, and a priced gcp lane that only writes a ledger (what "saved" is read at)."""
    command = json.dumps(["true"])
    lane = f"command = {command}\nprice_per_gpu_hour = {PRICE}\n"
    return ledger_config(tmp_path, cap=30, poll=1, router="follow_interval_seconds = 1\n", lane=lane)


def _script(slurm: Cluster, body: str) -> str:
    """A job script running ``body`` (bash), in a per-call folder of the 1777 jobs dir."""
    folder = slurm.jobs_dir / f"it-{uuid.uuid4().hex[:8]}"
    folder.mkdir(mode=0o777)
    path = folder / "job.sh"
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)
    return str(path)


def _submit(config: Path, slurm: Cluster, body: str, *flags: str, time_limit: str = "0:10:00") -> str:
    """Submit a 1-GPU job running ``body``, detached; its dispatch id."""
    done = cli(
        config, "submit", "--detach", *flags, "--gpus", "1", "--time", time_limit, _script(slurm, body), "--",
        *slurm.job_args(), timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _row(tmp_path: Path, dispatch_id: str) -> Any:
    with read_journal(tmp_path) as journal:
        return journal.dispatch(dispatch_id)


def _running(slurm: Cluster, tmp_path: Path, *ids: str) -> list[str]:
    """Wait until each dispatch is RUNNING; their SLURM job ids."""
    slurm.wait_for(lambda: all(_row(tmp_path, i).state == "RUNNING" for i in ids), f"{ids} to run", timeout=60)
    return [_row(tmp_path, i).job_id for i in ids]


def _triggers(tmp_path: Path, dispatch_id: str) -> list[str]:
    with read_journal(tmp_path) as journal:
        return [s.trigger for s in journal.steps(dispatch_id)]


def test_every_end_is_one_word_and_wait_exits_by_it(slurm: Cluster, tmp_path: Path, no_driver_left: None) -> None:
    """Five jobs side by side end five ways: exit 3 is failed (wait exits 20), over its 1-minute --time is timeout
    (21), an outside scancel is cancelled (25, who in the note), a requeued job is followed pending where SLURM put
    it and succeeds; `submit --wait` of a job exiting 0 exits 0. `wait --timeout` gives up with 124. Every
    dispatch's JSON carries its result and exit code, final only once ended; `spend` shows the free GPU-hours and
    what they saved at the gcp lane's price."""
    config = _config(tmp_path)
    three = _submit(config, slurm, "sleep 2\nexit 3")
    over = _submit(config, slurm, "sleep 300", time_limit="0:01:00")
    outside = _submit(config, slurm, "sleep 300")
    requeued = _submit(config, slurm, "sleep 20")
    outside_job, requeued_job = _running(slurm, tmp_path, outside, requeued)
    running = json_of(cli(config, "status", outside, "--json"))[0]
    assert (running["state"], running["final"], running["result"], running["exit_code"]) == (
        "RUNNING",
        False,
        None,
        None,
    )

    subprocess.run(["scancel", outside_job], check=True, timeout=30)
    subprocess.run(["scontrol", "requeue", requeued_job], check=True, timeout=30)
    slurm.wait_for(lambda: "requeue" in _triggers(tmp_path, requeued), "the requeue to be followed", timeout=60)

    gave_up = cli(config, "wait", over, "--timeout", "1")
    assert gave_up.returncode == 124, gave_up.stderr
    assert "not ended after 1 s" in gave_up.stderr

    zero = cli(
        config, "submit", "--wait", "--gpus", "1", "--time", "0:10:00", _script(slurm, "sleep 1\nexit 0"), "--",
        *slurm.job_args(), timeout=120,
    )  # fmt: skip
    assert zero.returncode == 0, zero.stderr
    assert "succeeded (exit 0)" in zero.stdout

    assert cli(config, "wait", three, timeout=120).returncode == 20
    cancelled = cli(config, "wait", outside, timeout=120)
    assert cancelled.returncode == 25, cancelled.stderr
    assert "cancelled" in cancelled.stdout
    both = cli(config, "wait", requeued, over, "--json", timeout=240)
    assert both.returncode == 21, both.stderr  # the first that did not succeed: over its --time
    again, timed_out = json.loads(both.stdout)
    assert (again["state"], again["final"], again["result"]) == ("ENDED", True, "succeeded")
    assert (timed_out["result"], timed_out["final"]) == ("timeout", True)
    assert timed_out["elapsed_seconds"] >= 60
    steps = _triggers(tmp_path, requeued)
    assert steps.count("requeue") == 1
    assert steps[-1] == "end"
    assert "resubmit" not in steps  # never walked again

    rows = {r["dispatch_id"]: r for r in json_of(cli(config, "status", "--json", "--all"))}
    assert (rows[three]["result"], rows[three]["exit_code"]) == ("failed", 3)
    assert rows[outside]["result"] == "cancelled"
    with read_journal(tmp_path) as journal:
        note = journal.steps(outside)[-1].note
        ends = journal.ends()
    assert "scancel by uid" in note
    assert len(ends) == 5
    hours = sum(e.gpu_hours for e in ends.values())
    assert hours > 60 / 3600  # the timeout job alone held its GPU a minute

    spent = json_of(cli(config, "spend", "--json"))
    free = spent["free"]
    assert (free["price_lane"], free["price_per_gpu_hour"]) == ("gcp", PRICE)
    assert free["day"]["clusters"]["fellows"]["jobs"] == 5
    assert free["day"]["gpu_hours"] == pytest.approx(hours)
    assert free["day"]["saved"] == pytest.approx(hours * PRICE)
    table = cli(config, "spend")
    assert table.returncode == 0, table.stderr
    assert "free clusters" in table.stdout


def _slurmdbd_pid() -> int | None:
    path = RUNTIME / "run" / "slurmdbd.pid"
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def _stop_slurmdbd(slurm: Cluster) -> None:
    pid = _slurmdbd_pid()
    assert pid is not None, "slurmdbd does not run"
    os.kill(pid, signal.SIGTERM)
    slurm.wait_for(lambda: _slurmdbd_pid() is None, "slurmdbd to stop", timeout=30)


def _start_slurmdbd(slurm: Cluster) -> None:
    if _slurmdbd_pid() is None:
        subprocess.run(["slurmdbd"], check=True, timeout=30, stdin=subprocess.DEVNULL, capture_output=True)

    def answers() -> bool:
        probe = ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"]
        return subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0

    slurm.wait_for(answers, "slurmdbd to answer", timeout=60, tick=0.5)


def test_an_end_while_slurmdbd_is_down_and_the_driver_killed_is_recorded_once(
    slurm: Cluster, tmp_path: Path, no_driver_left: None
) -> None:
    """Two jobs end while their driver is killed and slurmdbd is stopped: `watch --once` (cron) cannot tell how they
    ended and records nothing (never a guess); once accounting answers, the next `watch --once` records each end,
    once, with its exit code."""
    config = _config(tmp_path)
    ok = _submit(config, slurm, "sleep 6\nexit 0")
    bad = _submit(config, slurm, "sleep 6\nexit 3")
    jobs = _running(slurm, tmp_path, ok, bad)
    stop_background_driver(tmp_path, (signal.SIGKILL,))
    _stop_slurmdbd(slurm)
    try:
        slurm.wait_for(lambda: not set(jobs) & set(slurm.live_ids()), "both jobs to end", timeout=60, tick=0.5)
        for _ in range(3):
            once = cli(config, "watch", "--once", timeout=120)
            assert once.returncode == 0, once.stderr
            assert {_row(tmp_path, i).state for i in (ok, bad)} == {"RUNNING"}
            time.sleep(1)
    finally:
        _start_slurmdbd(slurm)

    def recorded() -> bool:
        cli(config, "watch", "--once", timeout=120)
        return all(_row(tmp_path, i).final for i in (ok, bad))

    slurm.wait_for(recorded, "the ends to be recorded", timeout=120, tick=1)
    with read_journal(tmp_path) as journal:
        ends = journal.ends([ok, bad])
        counts = [[s.trigger for s in journal.steps(i)].count("end") for i in (ok, bad)]
    assert (ends[ok].result, ends[ok].exit_code) == ("succeeded", 0)
    assert (ends[bad].result, ends[bad].exit_code) == ("failed", 3)
    assert counts == [1, 1]
