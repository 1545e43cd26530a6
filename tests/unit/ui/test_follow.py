"""Following a dispatch live (ui/follow.py): submit's final frame and summary, and a follower of a dispatch
another process drives."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from fellows_fsm import Fellows
from fellows_fsm.config.file import load_config
from fellows_fsm.journal.store import Journal
from fellows_fsm.testing import ThreadedDriver
from fellows_fsm.ui import app as ui_app
from tests.unit.cli_helpers import SchedulingFake, _config_text, fill, run


def test_submit_live_view_ends_with_the_final_frame_and_a_summary(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """Without --json, the live view's last frame and a one-line summary go to stdout."""
    fill(scheduling_fake, "high-eur")
    result = run("submit", str(script))
    assert result.exit_code == 0, result.output
    assert "RUNNING" in result.stdout
    assert "normal-eur" in result.stdout
    assert "QOSMaxGRESPerUser" in result.stdout  # the park step, in the tail of steps under the panel
    assert result.stdout.strip().splitlines()[-1].startswith("dispatch ")
    assert "is RUNNING on normal-eur as SLURM job" in result.stdout


def test_a_submit_while_a_program_drives_follows_and_starts_a_driver_once_it_stops(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """While another process holds the driver lock, submit enqueues and follows; once that process lets go, the
    follower starts the background driver, which walks the dispatch: the follower itself never drives."""
    driver = Journal(load_config().journal_path)
    driver.acquire_driver()
    timer = threading.Timer(0.5, driver.release_driver)
    timer.start()
    try:
        result = run("submit", str(script))
    finally:
        timer.cancel()
        driver.close()
    assert result.exit_code == 0, result.output
    assert "is driven by another router (pid " in result.stderr
    assert ui_app.STARTED in result.stderr
    assert drivers.started == 1
    assert "is RUNNING on high-eur as SLURM job" in result.stdout
    [job] = scheduling_fake.jobs.values()
    assert job.state == "RUNNING"


def test_a_follower_exits_with_the_status_its_dispatch_ended_with(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A submit whose dispatch another process drives to a failed GCP handoff exits 8, as the driver would."""
    scheduling_fake.scheduling = False
    (env / "fellows.toml").write_text(_config_text(env / "state", env / "gcp.ledger", fail_gcp=True))
    driving, stop = threading.Event(), threading.Event()

    def drive() -> None:  # another process: its own journal connection, in its own thread
        with Fellows(load_config(), scheduler=scheduling_fake) as driver:
            assert driver.drive()
            driving.set()
            while not stop.is_set():
                driver.poll()
                time.sleep(0.02)

    thread = threading.Thread(target=drive)
    thread.start()
    try:
        assert driving.wait(10)
        result = run("submit", "--json", str(script))
    finally:
        stop.set()
        thread.join()
    assert result.exit_code == 8, result.output
    assert "is driven by another router" in result.stderr
    assert "this process drives it now" not in result.stderr
    out = json.loads(result.stdout)
    assert (out["state"], out["outcome"]) == ("HANDOFF_FAILED", "handoff-failed")
    assert "quota exceeded in europe-west4" in result.stderr
    assert [j.qos for j in scheduling_fake.jobs.values()] == ["high-eur", "normal-eur", "low-eur"]
