"""The fellows-fsm command line through its entry point (CliRunner) on the shipped fake port: outputs, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fellows_fsm import Fellows, SubmitRejected, cli
from fellows_fsm.config import FellowsConfig, load_config
from fellows_fsm.diagram import mermaid, state_diagram_page
from fellows_fsm.errors import SchedulerError
from fellows_fsm.journal import Journal
from fellows_fsm.scheduler import ReasonGroup
from fellows_fsm.slurm import Grants
from fellows_fsm.testing import ThreadedDriver
from fellows_fsm.ui import app as ui_app
from fellows_fsm.ui import paths as ui_paths
from fellows_fsm.ui import words as ui_words
from tests.unit.cli_helpers import (
    DISPATCH_KEYS,
    GRANTS,
    HISTORY_KEYS,
    SchedulingFake,
    _config_text,
    _count_parsed_rows,
    _journal_of,
    _toml,
    fill,
    ledger,
    one_error_line,
    refused,
    run,
    world,
)


# --------------------------------------------------------------------------- submit
def test_submit_walks_to_normal_eur_and_prints_json(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """With the user's high-eur cap full, submit --json follows the dispatch to RUNNING on normal-eur."""
    fill(scheduling_fake, "high-eur")
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out.keys() >= DISPATCH_KEYS
    assert (out["state"], out["lane"], out["qos"], out["final"]) == ("RUNNING", "fellows", "normal-eur", True)
    assert scheduling_fake.jobs[out["slurm_job_id"]].qos == "normal-eur"
    assert ledger(env) == []


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


def test_submit_parks_out_of_every_rung_and_hands_off_to_gcp(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """When no rung ever starts the job, the gcp command runs once and submit exits 0 with lane gcp."""
    scheduling_fake.scheduling = False
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["lane"], out["outcome"]) == ("FAILED_TO_GCP", "gcp", "handed-off")
    assert ledger(env) == [out["dispatch_id"]]
    assert [j.qos for j in scheduling_fake.jobs.values()] == ["high-eur", "normal-eur", "low-eur"]
    assert not scheduling_fake.live_jobs()


def test_submit_gcp_failure_exits_8_with_one_line(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A failing gcp command ends submit with exit 8 and the command's own last words on one line."""
    scheduling_fake.scheduling = False
    (env / "fellows.toml").write_text(_config_text(env / "state", env / "gcp.ledger", fail_gcp=True))
    result = run("submit", "--json", str(script))
    assert result.exit_code == 8
    assert json.loads(result.stdout)["outcome"] == "handoff-failed"
    assert "quota exceeded in europe-west4" in one_error_line(result)


def test_submit_pin_gcp_hands_off_at_once(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--pin gcp never touches SLURM: the gcp command runs and the dispatch is HANDED_OFF."""
    result = run("submit", "--pin", "gcp", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["lane"], out["slurm_job_id"]) == ("HANDED_OFF", "gcp", None)
    assert ledger(env) == [out["dispatch_id"]]
    assert scheduling_fake.jobs == {}


def test_submit_detach_prints_the_id_and_watch_drives_it(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """--detach prints only the dispatch id; watch --once shows it waiting on high-eur, watch follows it to RUNNING
    (a 30 s cap here: the background driver must not walk it on before watch --once looks, on a loaded machine)."""
    config = env / "fellows.toml"
    config.write_text(config.read_text().replace("park_cap_seconds = 0.3", "park_cap_seconds = 30"))
    scheduling_fake.scheduling = False
    result = run("submit", "--detach", str(script))
    assert result.exit_code == 0, result.output
    dispatch_id = result.stdout.strip()
    assert len(dispatch_id) == 12
    once = run("watch", "--once", "--json")
    assert once.exit_code == 0, once.output
    assert [d["state"] for d in json.loads(once.stdout)] == ["SUBMITTED(high-eur)"]
    scheduling_fake.scheduling = True
    done = run("watch", "--json")
    assert done.exit_code == 0, done.output
    [out] = json.loads(done.stdout)
    assert (out["dispatch_id"], out["state"], out["qos"]) == (dispatch_id, "RUNNING", "high-eur")
    assert run("watch").stdout.startswith("no live dispatches")


def test_next_submit_drives_detached_dispatches(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A submit that follows its own dispatch also drives the ones detached before it."""
    scheduling_fake.scheduling = False
    first = run("submit", "--detach", str(script)).stdout.strip()
    scheduling_fake.scheduling = True
    assert run("submit", str(script)).exit_code == 0
    [row] = json.loads(run("status", first, "--json").stdout)
    assert row["state"] == "RUNNING"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), ("train", 8, 3600)),
        (("--gpus", "2"), ("train", 2, 3600)),
        (("--time", "30"), ("train", 8, 1800)),
        (("--name", "other", "--gpus", "0", "--time", "1-00:00:00"), ("other", 0, 86400)),
    ],
    ids=["script-defaults", "gpus-flag-wins", "time-flag-wins", "all-flags-win"],
)
def test_submit_reads_sbatch_lines_and_flags_win(
    env: Path, scheduling_fake: SchedulingFake, script: Path, flags: tuple[str, ...], expected: tuple[str, int, int]
) -> None:
    """#SBATCH --gres/--time/-J are the defaults; --gpus, --time and --name override them."""
    result = run("submit", "--detach", *flags, str(script), "--", "--mem=4G", "--chdir=/tmp")
    assert result.exit_code == 0, result.output
    [job] = scheduling_fake.jobs.values()
    assert (job.spec.name, job.spec.gpus, job.spec.time_limit_seconds) == expected
    assert job.spec.extra_args == ("--mem=4G", "--chdir=/tmp")
    assert job.spec.script == str(script.resolve())


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("#SBATCH --gres=gpu:8\n#SBATCH --time=2:00:00\n#SBATCH --job-name=a", (8, 7200, "a")),
        ("#SBATCH --gres gpu:a100:4 -t 90\n#SBATCH -J b", (4, 5400, "b")),
        ("#SBATCH --gpus=h100:3 --time 1-00:00\n", (3, 86400, None)),
        ("#SBATCH -G 2\n#SBATCH -t10:00", (2, 600, None)),
        ("#SBATCH --gres=gpu:1\n#SBATCH --gres=gpu:2", (2, None, None)),
        ("echo hi\n#SBATCH --gres=gpu:8", (None, None, None)),
        ("#SBATCH --gres=shard:4 --mem=4G", (None, None, None)),
    ],
    ids=["long-forms", "spaces-and-short", "gpus-typed", "short-glued", "last-wins", "stops-at-command", "no-gpu"],
)
def test_read_script_defaults(tmp_path: Path, lines: str, expected: tuple[int | None, int | None, str | None]) -> None:
    """The #SBATCH header is read like sbatch reads it: long and short forms, last one wins, stop at a command."""
    path = tmp_path / "job.sbatch"
    path.write_text(f"#!/bin/bash\n{lines}\nsrun true\n")
    got = cli.read_script_defaults(path)
    assert (got.gpus, got.time_limit_seconds, got.name) == expected


def test_bad_time_in_script_is_a_usage_error(env: Path, tmp_path: Path) -> None:
    """An unparseable #SBATCH --time exits 2 naming the file, line and value."""
    path = tmp_path / "bad.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --time=soon\nsleep 1\n")
    result = run("submit", str(path))
    assert result.exit_code == 2
    assert "bad.sbatch:2" in result.stderr
    assert "'soon'" in result.stderr


@pytest.mark.parametrize(
    "args",
    [("submit", "--intent", "bogus", "x.sbatch"), ("submit", "missing.sbatch"), ("history",), ("nonsense",)],
    ids=["bad-choice", "missing-script", "missing-argument", "unknown-command"],
)
def test_usage_errors_exit_2(env: Path, args: tuple[str, ...]) -> None:
    """Usage errors are click's: exit 2."""
    assert run(*args).exit_code == 2


def test_unknown_pin_is_a_config_error(env: Path, script: Path) -> None:
    """--pin naming no configured lane exits 3 and lists the known lanes."""
    result = run("submit", "--pin", "runpod", str(script))
    assert result.exit_code == 3
    assert "known lanes: fellows, gcp" in one_error_line(result)


def test_unreachable_slurm_at_submit_exits_6(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When SLURM does not answer the first submit, submit exits 6 and the dispatch stays journaled for watch."""
    monkeypatch.setattr(cli, "DETACH_WAIT_SECONDS", 0.5)  # how long submit waits for the driver's first sbatch
    scheduling_fake.unreachable = True
    result = run("submit", str(script))
    assert result.exit_code == 6
    assert "fellows-fsm watch" in one_error_line(result)
    scheduling_fake.unreachable = False
    [row] = json.loads(run("status", "--json").stdout)
    assert (row["final"], row["slurm_job_id"]) == (False, None)


def test_watch_once_exits_6_when_slurm_does_not_answer(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """watch --once (no driver running: it polls itself) reports an unanswered poll with exit 6."""
    scheduling_fake.scheduling = False
    run("submit", "--detach", str(script))
    drivers.close()  # the background driver stopped: watch --once is the cron fallback that polls itself
    scheduling_fake.unreachable = True
    result = run("watch", "--once")
    assert result.exit_code == 6
    assert "did not answer" in one_error_line(result)


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('[fellows]\npark_cap_seconds = "ten"\n', ["fellows.toml", "park_cap_seconds", "'ten'"]),
        ("[fellows]\nqos_ladder = ['high-eur', 'low-eur']\n", ["fellows.toml", "qos_ladder", "'high-eur'", "remove"]),
        ("[fellows\n", ["fellows.toml", "not valid TOML"]),
        ("[fellows]\nbogus = 1\n", ["fellows.toml", "unknown key 'bogus'"]),
    ],
    ids=["not-a-number", "ladder-repeats-qos", "bad-toml", "unknown-key"],
)
def test_config_errors_exit_3_naming_file_key_and_value(env: Path, toml: str, words: list[str]) -> None:
    """A wrong config exits 3 with one line naming the file, the key and the bad value."""
    (env / "fellows.toml").write_text(toml)
    result = run("config", "check")
    assert result.exit_code == 3
    line = one_error_line(result)
    for word in words:
        assert word in line


def test_park_cap_env_var_sets_the_default(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EPS_FELLOWS_QUEUE_WAIT_SECONDS sets the park cap when the config does not."""
    monkeypatch.setenv("EPS_FELLOWS_QUEUE_WAIT_SECONDS", "42")
    toml = (env / "fellows.toml").read_text().replace("park_cap_seconds = 0.3\n", "")
    (env / "fellows.toml").write_text(toml)
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "42s" in result.stdout


def test_config_option_beats_the_env_var(env: Path, tmp_path: Path) -> None:
    """--config (before or after the command) wins over FELLOWS_FSM_CONFIG."""
    other = tmp_path / "other.toml"
    other.write_text((env / "fellows.toml").read_text().replace("park_cap_seconds = 0.3", "park_cap_seconds = 77"))
    for args in (("--config", str(other), "config", "check"), ("config", "check", "--config", str(other))):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "1m 17s" in result.stdout


def test_config_check_prints_ladder_caps_lanes_and_worst_case(env: Path) -> None:
    """config check exits 0 and prints the rungs with their caps, the lanes and the worst case."""
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    for word in ("high-eur", "normal-eur", "low-eur", "gcp", "worst case", "config OK"):
        assert word in result.stdout


def test_debug_shows_the_traceback(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--debug lets the error through (a traceback) instead of the one-line message."""
    scheduling_fake.unreachable = True
    result = CliRunner().invoke(cli.main, ["--debug", "submit", str(script)])
    assert result.exit_code != 0
    assert type(result.exception).__name__ == "SchedulerUnreachable"


# --------------------------------------------------------------------------- status, history
def test_status_lists_dispatches_with_the_documented_keys(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """status --json is a list of objects with the dispatch keys; the table names each dispatch."""
    scheduling_fake.scheduling = False
    ids = [run("submit", "--detach", str(script)).stdout.strip() for _ in range(2)]
    result = run("status", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["dispatch_id"] for r in rows] == ids
    assert all(r.keys() >= DISPATCH_KEYS for r in rows)
    assert all(r["state"] == "SUBMITTED(high-eur)" for r in rows)
    table = run("status").stdout
    assert all(i in table for i in ids)


def test_status_reads_while_another_router_drives(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """status works while the background driver holds the journal's driver lock, and starts no second one."""
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    assert Journal(load_config().journal_path, readonly=True).driver_alive()
    result = run("status", dispatch_id[:6], "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["dispatch_id"] == dispatch_id
    assert drivers.started == 1


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
    assert (out["state"], out["outcome"]) == ("FAILED_TO_GCP", "handoff-failed")
    assert "quota exceeded in europe-west4" in result.stderr
    assert [j.qos for j in scheduling_fake.jobs.values()] == ["high-eur", "normal-eur", "low-eur"]


def test_detach_while_another_router_drives_enqueues_without_queueing(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit --detach never queues a job itself: while a process that does not tick holds the lock, it waits
    for that driver's sbatch, exits 6 with the dispatch journaled, and the next driver queues the job."""
    monkeypatch.setattr(cli, "DETACH_WAIT_SECONDS", 0.5)
    driver = Journal(load_config().journal_path)
    driver.acquire_driver()
    try:
        result = run("submit", "--detach", str(script))
    finally:
        driver.close()
    assert result.exit_code == 6, result.output
    [row] = json.loads(run("status", "--json").stdout)
    assert (row["state"], row["final"]) == ("SUBMITTED(high-eur)", False), row["outcome"]
    done = run("watch", "--json")
    assert done.exit_code == 0, done.output
    assert [(d["dispatch_id"], d["state"]) for d in json.loads(done.stdout)] == [(row["dispatch_id"], "RUNNING")]
    assert len(scheduling_fake.jobs) == 1


def test_watch_once_while_another_router_drives_says_who(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """watch --once while the journal is driven elsewhere names the driver, polls nothing, and lists the dispatches."""
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    drivers.close()
    driver = Journal(load_config().journal_path)
    driver.acquire_driver()
    observed = scheduling_fake.calls["observe"]
    try:
        result = run("watch", "--once", "--json")
    finally:
        driver.close()
    assert result.exit_code == 0, result.output
    assert f"is driven by another router (pid {os.getpid()}" in result.stderr
    assert [d["dispatch_id"] for d in json.loads(result.stdout)] == [dispatch_id]
    assert scheduling_fake.calls["observe"] == observed


def test_status_of_an_unknown_dispatch_is_a_usage_error(env: Path) -> None:
    """An unknown dispatch id exits 2 and points at `fellows-fsm status`."""
    result = run("status", "nosuchid")
    assert result.exit_code == 2
    assert "fellows-fsm status" in result.stderr


def test_history_json_has_every_transition_with_reason(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """history --json lists submit, park (QOSMaxGRESPerUser), cancel, resubmit, start with UTC ISO times."""
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    result = run("history", dispatch_id, "--json")
    assert result.exit_code == 0
    entries = json.loads(result.stdout)
    assert all(set(e) == HISTORY_KEYS for e in entries)
    assert [(e["trigger"], e["to"]) for e in entries] == [
        ("submit", "SUBMITTED(high-eur)"),
        ("park", "PARKED"),
        ("cancel", "CANCELLED"),
        ("resubmit", "RESUBMITTED(normal-eur)"),
        ("start", "RUNNING"),
    ]
    assert entries[0]["from"] is None
    assert entries[1]["reason"] == "QOSMaxGRESPerUser"
    assert entries[0]["slurm_job_id"] is not None
    assert entries[3]["slurm_job_id"] not in (None, entries[0]["slurm_job_id"])
    assert all(e["at"].endswith("+00:00") for e in entries)
    table = run("history", dispatch_id).stdout
    assert "your own high-eur GPU cap is full" in table


# --------------------------------------------------------------------------- cancel
def test_cancel_withdraws_a_pending_dispatch(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """cancel scancels the dispatch's job, marks it final (withdrawn), and a later watch never resubmits it."""
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    [job] = scheduling_fake.jobs.values()
    result = run("cancel", dispatch_id)
    assert result.exit_code == 0, result.output
    assert job.state == "CANCELLED"
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"], row["outcome"]) == ("WITHDRAWN", True, "withdrawn")
    assert run("watch").stdout.startswith("no live dispatches")
    assert len(scheduling_fake.jobs) == 1
    history = json.loads(run("history", dispatch_id, "--json").stdout)
    assert history[-1]["trigger"] == "withdraw"


def test_cancel_a_running_dispatch_cancels_its_job(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """cancel works whatever the state: a RUNNING dispatch's job is cancelled too."""
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    [job] = scheduling_fake.jobs.values()
    assert job.state == "RUNNING"
    assert run("cancel", dispatch_id).exit_code == 0
    assert job.state == "CANCELLED"


def test_cancel_while_the_driver_drives_is_done_by_the_driver(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """cancel while the background driver walks the dispatch asks that driver (the one doer): withdrawn, job gone."""
    scheduling_fake.scheduling = False
    dispatch_id = run("submit", "--detach", str(script)).stdout.strip()
    assert Journal(load_config().journal_path, readonly=True).driver_alive()
    result = run("cancel", dispatch_id)
    assert result.exit_code == 0, result.output
    [job] = scheduling_fake.jobs.values()
    assert f"withdrawn (SLURM jobs cancelled: {job.job_id})" in result.stdout
    assert job.state == "CANCELLED"
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"]) == ("WITHDRAWN", True)
    assert drivers.started == 1


def test_cancel_a_handed_off_dispatch_is_refused(env: Path, script: Path) -> None:
    """A dispatch already handed to gcp cannot be taken back: exit 1 naming the lane."""
    dispatch_id = json.loads(run("submit", "--pin", "gcp", "--json", str(script)).stdout)["dispatch_id"]
    result = run("cancel", dispatch_id)
    assert result.exit_code == 1
    assert "handed to lane gcp" in one_error_line(result)


# --------------------------------------------------------------------------- ladder
@pytest.mark.parametrize(
    ("args", "warning"),
    [
        ((), None),
        (("--gpus", "32"), "skipping high-eur"),
        (("--time", "10-00:00:00"), "MaxWall"),
    ],
    ids=["fits-everywhere", "over-per-user-cap", "over-max-wall"],
)
def test_ladder_json_reports_grants_rungs_and_warnings(env: Path, args: tuple[str, ...], warning: str | None) -> None:
    """ladder --json shows the granted QoS, each rung with its verdict, and why a job could never fit."""
    result = run("ladder", "--json", *args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"user", "granted", "ladder", "warnings", "worst_case_seconds"} <= out.keys()
    assert [r["qos"] for r in out["ladder"]] == ["high-eur", "normal-eur", "low-eur"]
    assert out["worst_case_seconds"] == pytest.approx(0.9)
    if warning is None:
        assert out["warnings"] == []
        assert all(r["usable"] for r in out["ladder"])
    else:
        assert any(warning in w for w in out["warnings"])
        assert not out["ladder"][0]["usable"]


def test_ladder_warns_about_an_ungranted_qos(env: Path) -> None:
    """A QoS in qos_ladder that the user is not granted is a warning in the table, not a crash."""
    toml = (
        (env / "fellows.toml")
        .read_text()
        .replace("[fellows]\n", "[fellows]\nqos_ladder = ['normal-eur', 'gold-eur']\n")
    )
    (env / "fellows.toml").write_text(toml)
    result = run("ladder")
    assert result.exit_code == 0, result.output
    assert "gold-eur is on the ladder but not granted" in " ".join(result.stdout.split())


# --------------------------------------------------------------------------- diagram
def test_diagram_reference_formats(env: Path, tmp_path: Path) -> None:
    """mermaid and markdown without --dispatch are the reference diagram and docs page."""
    assert run("diagram").stdout == mermaid(FellowsConfig(park_cap_seconds=600).ladder)
    out = tmp_path / "page.md"
    assert run("diagram", "--format", "markdown", "-o", str(out)).exit_code == 0
    assert out.read_text() == state_diagram_page()


def test_diagram_of_a_dispatch_marks_its_path(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--dispatch marks the visited states and taken edges with their times, the final state as current."""
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    text = run("diagram", "--dispatch", dispatch_id).stdout
    assert f"title: dispatch {dispatch_id}" in text
    assert "class RUNNING current" in text
    assert "class SUBMITTED_high_eur,PARKED,CANCELLED,RESUBMITTED_normal_eur visited" in text
    taken = [line for line in text.splitlines() if "✔" in line]
    assert len(taken) == 5  # submit, park, cancel, resubmit, start
    assert not any("RESUBMITTED_low_eur" in line for line in taken)


def test_diagram_dot_of_a_dispatch(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--format dot draws the path in Graphviz DOT (skipped without the graphviz extra)."""
    pytest.importorskip("graphviz")
    fill(scheduling_fake, "high-eur")
    dispatch_id = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    result = run("diagram", "--format", "dot", "--dispatch", dispatch_id)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f'digraph "dispatch {dispatch_id}"')
    assert "penwidth=2.5" in result.stdout


@pytest.mark.parametrize(
    ("fmt", "missing", "words"),
    [("dot", "find_spec", "pip install 'fellows-fsm[graphviz]'"), ("svg", "which", "apt-get install graphviz")],
    ids=["dot-without-python-graphviz", "svg-without-dot"],
)
def test_diagram_names_what_to_install(
    env: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, missing: str, words: str
) -> None:
    """Without graphviz, dot and svg fail with one line naming what to install."""
    if missing == "find_spec":
        monkeypatch.setattr(ui_paths, "find_spec", lambda name: None)
    else:
        pytest.importorskip("graphviz")
        monkeypatch.setattr(ui_paths.shutil, "which", lambda name: None)
    result = run("diagram", "--format", fmt)
    assert result.exit_code == 1
    assert words in one_error_line(result)


# --------------------------------------------------------------------------- demo, entry points, words
def test_demo_refuses_the_fake(env: Path) -> None:
    """The demo runs on the real SLURM only: with a fake port it exits 5 and says so."""
    result = run("demo")
    assert result.exit_code == 5
    assert "real SLURM only" in one_error_line(result)


def test_python_dash_m_runs_the_same_cli() -> None:
    """`python -m fellows_fsm --help` lists the commands."""
    out = subprocess.run(
        [sys.executable, "-m", "fellows_fsm", "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    for command in ("submit", "watch", "status", "history", "ladder", "diagram", "cancel", "config", "demo"):
        assert command in out


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("QOSMaxGRESPerUser", "your own high-eur GPU cap is full"),
        ("QOSMaxCpuPerUserLimit", "your own high-eur limit is reached"),
        ("Resources", "free GPUs"),
        ("Priority", "higher-priority"),
        ("QOSMaxWallDurationPerJobLimit", "MaxWall"),
        ("InvalidQOS", "refuses high-eur"),
        ("JobHeldUser", "scontrol release 42"),
        (None, "has not looked at it yet"),
        ("SomethingNew", "pending"),
    ],
    ids=["own-gpu-cap", "own-other-cap", "resources", "priority", "never-fits", "invalid", "held", "none", "other"],
)
def test_explain_reason_in_plain_words(reason: str | None, words: str) -> None:
    """Each pending reason reads as a short sentence about the rung."""
    assert words in ui_words.explain_reason(reason, "high-eur", "42")


def test_every_reason_group_has_words() -> None:
    """No reason group falls through without a sentence."""
    assert set(ui_words._GROUP_WORDS) == set(ReasonGroup)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (4.2, "5s"), (65, "1m 05s"), (3723, "1h 02m 03s"), (2 * 86400 + 3 * 3600, "2d 03h 00m")],
    ids=["zero", "rounds-up", "minutes", "hours", "days"],
)
def test_span_reads_like_a_countdown(seconds: float, text: str) -> None:
    """Durations read as short countdowns."""
    assert ui_words.span(seconds) == text


def test_the_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/fellows.toml is a valid config: config check exits 0 with its gcp lane."""
    monkeypatch.delenv("FELLOWS_FSM_CONFIG", raising=False)
    example = Path(__file__).resolve().parents[2] / "examples" / "fellows.toml"
    result = run("config", "check", "--config", str(example))
    assert result.exit_code == 0, result.output
    assert "gcloud batch jobs submit" in result.stdout


def test_diagram_svg_is_a_valid_svg_document(env: Path, tmp_path: Path) -> None:
    """--format svg writes a well-formed SVG document showing every state of the ladder."""
    import xml.etree.ElementTree as ET  # noqa: PLC0415 - only this test parses XML

    out = tmp_path / "lifecycle.svg"
    result = run("diagram", "--format", "svg", "-o", str(out))
    assert result.exit_code == 0, result.output
    root = ET.fromstring(out.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    for label in ("SUBMITTED(high-eur)", "RESUBMITTED(normal-eur)", "RESUBMITTED(low-eur)", "FAILED_TO_GCP"):
        assert label in texts


BAD_CONFIGS = [
    ({"fellows": "qos_ladder = ['high-eur', 'normal-eur']"}, ["qos_ladder", "repeats qos='high-eur'", "remove"]),
    ({"gcp": "['gcloud', 'fsm-{dispatch_id']"}, ["[lanes.gcp] command", "'fsm-{dispatch_id'"]),
    ({"fellows": "park_cap_seconds = 1e12"}, ["park_cap_seconds=1000000000000.0", "maximum"]),
    ({"fellows": "park_cap_seconds = 1e300"}, ["park_cap_seconds=1e+300", "maximum"]),
    ({"fellows": "poll_interval_seconds = 0.000001"}, ["poll_interval_seconds=1e-06", "minimum"]),
    ({"router": "order = ['fellows', 'gcp', 'gcp']"}, ["order=", "'gcp' twice"]),
    ({"gcp": "['sh', '-c', 'sky launch {job_name}']"}, ["[lanes.gcp] command", "{job_name}", "$FSM_JOB_NAME"]),
    ({"gcp": "['/bin/bash', '-ec', 'echo {script}']"}, ["[lanes.gcp] command", "{script}", "$FSM_SCRIPT"]),
    ({"top": "state_dir = 5"}, ["state_dir=5"]),
]


@pytest.mark.parametrize(
    ("parts", "words"),
    BAD_CONFIGS,
    ids=[
        "ladder-repeats-qos",
        "unclosed-placeholder",
        "park-cap-1e12",
        "park-cap-1e300",
        "poll-one-microsecond",
        "order-lists-gcp-twice",
        "placeholder-in-sh-c",
        "placeholder-in-bash-ec",
        "state-dir-not-a-path",
    ],
)
def test_bad_config_is_refused_by_check_and_by_submit(
    env: Path, scheduling_fake: SchedulingFake, script: Path, parts: dict[str, str], words: list[str]
) -> None:
    """config check and submit both exit 3 with one line naming the bad value; submit queues nothing."""
    scheduling_fake.scheduling = False
    assert run("submit", "--detach", str(script)).exit_code == 0  # a journal with one dispatch in it
    before = world(env, scheduling_fake)
    if "top" in parts:  # a second state_dir key would be a TOML error: replace the first one
        text = _toml(env, **{k: v for k, v in parts.items() if k != "top"})
        text = text.replace(f'state_dir = "{env / "state"}"', parts["top"])
    else:
        text = _toml(env, **parts)
    (env / "fellows.toml").write_text(text)
    refused(run("config", "check"), 3, "fellows.toml", *words)
    refused(run("submit", str(script)), 3, *words)
    assert world(env, scheduling_fake) == before


def test_relative_state_dir_is_next_to_the_config_file(env: Path, tmp_path: Path) -> None:
    """A relative state_dir resolves against the config file's directory, not the current one."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "fellows.toml").write_text('state_dir = "state"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = load_config(folder / "fellows.toml")
    assert config.journal_path == folder / "state" / "journal.sqlite3"
    result = run("--config", str(folder / "fellows.toml"), "config", "check")
    assert result.exit_code == 0, result.output
    assert str(folder / "state" / "journal.sqlite3") in result.stdout


def test_a_missing_lane_program_is_a_warning_not_an_error(env: Path) -> None:
    """A lane command not on PATH passes config check (exit 0) with a warning on stderr naming it."""
    (env / "fellows.toml").write_text(_toml(env, gcp="['no-such-gcloud-xyz', 'batch', 'fsm-{dispatch_id}']"))
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "warning: [lanes.gcp] command: 'no-such-gcloud-xyz' is not found on PATH" in result.stderr
    assert "config OK" in result.stdout


def test_a_tiny_poll_is_shown_as_it_is(env: Path) -> None:
    """A sub-second poll is shown with its real value (not rounded up to 1s) and warned about."""
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "every 0.05s" in result.stdout
    assert "poll_interval_seconds=0.05 asks SLURM more than once a second" in result.stderr


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("#SBATCH --gres=gpu:abc", ["train.sbatch:2", "--gres='gpu:abc'"]),
        ("#SBATCH --gres=gpu:a100", ["--gres='gpu:a100'", "gpu:TYPE:N"]),
        ("#SBATCH --gpus=many", ["--gpus='many'"]),
        ("#SBATCH --time=soon", ["train.sbatch:2", "'soon'"]),
    ],
    ids=["gres-count-not-a-number", "gres-type-without-count", "gpus-not-a-number", "time-not-a-time"],
)
def test_unreadable_sbatch_lines_are_usage_errors(
    env: Path, scheduling_fake: SchedulingFake, tmp_path: Path, line: str, words: list[str]
) -> None:
    """An #SBATCH line fellows-fsm cannot read exits 2 with one line naming file, line and value; nothing queued."""
    path = tmp_path / "train.sbatch"
    path.write_text(f"#!/bin/bash\n{line}\nsleep 1\n")
    before = world(env, scheduling_fake)
    refused(run("submit", str(path)), 2, *words)
    assert world(env, scheduling_fake) == before


@pytest.mark.parametrize(
    "args",
    [
        ("--qos=low-eur",),
        ("-q", "low-eur"),
        ("-qlow-eur",),
        ("-vq", "low-eur"),
        ("--qo=low-eur",),
        ("--comment=x",),
        ("--deadline=now+1hour",),
        ("--job-name=other",),
        ("-J", "other"),
        ("--gres=gpu:2",),
        ("--time=5",),
        ("--hold",),
        ("--array=0-3",),
    ],
    ids=" ".join,
)
def test_sbatch_options_fellows_fsm_owns_are_refused_after_dashdash(
    env: Path, scheduling_fake: SchedulingFake, script: Path, args: tuple[str, ...]
) -> None:
    """An owned sbatch option after `--` exits 2 with one line naming it; nothing is queued or journaled."""
    before = world(env, scheduling_fake)
    refused(run("submit", str(script), "--", "--mem=4G", *args), 2, repr(args[0]), "set by fellows-fsm itself")
    assert world(env, scheduling_fake) == before


def test_other_sbatch_options_pass_through(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """Options fellows-fsm does not own (e.g. --mem, --partition, --exclusive) reach sbatch unchanged."""
    result = run("submit", "--json", str(script), "--", "--mem=64G", "-p", "gpu", "--exclusive", "-v")
    assert result.exit_code == 0, result.output
    job = scheduling_fake.jobs[json.loads(result.stdout)["slurm_job_id"]]
    assert job.spec.extra_args == ("--mem=64G", "-p", "gpu", "--exclusive", "-v")


# --------------------------------------------------------------------------- the preflight through submit
def test_ungranted_qos_is_refused_before_anything_is_queued(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A QoS on the ladder that the cluster does not grant exits 3 naming it; nothing queued, journal unchanged."""
    (env / "fellows.toml").write_text(_toml(env, fellows="debug_qos = 'dev-eur'"))
    before = world(env, scheduling_fake)
    refused(run("submit", "--intent", "debug", str(script)), 3, "'dev-eur'", "not granted", "granted:")
    assert world(env, scheduling_fake) == before


def test_unknown_qos_is_refused_before_anything_is_queued(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A QoS the cluster does not have exits 3 naming it and the cluster's QoS; nothing queued."""
    (env / "fellows.toml").write_text(_toml(env, fellows="qos_ladder = ['normal-eur', 'gold-eur']"))
    before = world(env, scheduling_fake)
    refused(run("submit", str(script)), 3, "'gold-eur'", "does not exist on this cluster")
    assert world(env, scheduling_fake) == before


def test_a_rung_that_can_never_fit_is_skipped_with_the_reason_in_history(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A job over the MaxWall of high-eur and normal-eur starts on low-eur; the first step says why."""
    result = run("submit", "--json", "--time", "10-00:00:00", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["qos"]) == ("RUNNING", "low-eur")
    assert [j.qos for j in scheduling_fake.jobs.values()] == ["low-eur"]
    assert "skipping high-eur" in result.stderr
    steps = json.loads(run("history", out["dispatch_id"], "--json").stdout)
    assert steps[0]["to"] == "SUBMITTED(low-eur)"
    assert "skipping high-eur: the job's --time 10-00:00:00 is over its MaxWall" in steps[0]["note"]
    assert "skipping normal-eur" in steps[0]["note"]


def test_a_job_that_fits_no_rung_is_refused_before_any_paid_lane(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """A job over every rung's MaxWall exits 5 saying so; nothing queued, the gcp command never runs."""
    before = world(env, scheduling_fake)
    refused(run("submit", "--time", "20-00:00:00", str(script)), 5, "no rung", "--pin gcp", "MaxWall")
    assert world(env, scheduling_fake) == before
    assert ledger(env) == []


def test_a_refused_debug_job_still_gets_the_debug_warning_first(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """--intent debug without debug_qos warns before the refusal of a job no rung fits (exit 5), nothing queued."""
    result = run("submit", "--intent", "debug", "--time", "20-00:00:00", str(script))
    assert result.exit_code == 5
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("fellows-fsm: warning: --intent debug, but [fellows] debug_qos is not set")
    assert lines[-1].startswith("fellows-fsm: error: no rung")
    assert scheduling_fake.jobs == {}


def test_pinned_rung_that_can_never_fit_is_refused(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--pin fellows with a job over high-eur's per-user GPU cap exits 5 naming high-eur; nothing queued."""
    before = world(env, scheduling_fake)
    refused(run("submit", "--pin", "fellows", "--gpus", "32", str(script)), 5, "--pin fellows", "high-eur")
    assert world(env, scheduling_fake) == before


def test_a_burst_of_submits_reads_the_grants_once(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three submits in a row make one grants read; the cache file lives in the state dir."""
    reads: list[object] = []

    def counting(scheduler: object) -> Grants:
        reads.append(scheduler)
        return GRANTS

    monkeypatch.setattr(ui_app, "read_grants", counting)
    scheduling_fake.scheduling = False
    for _ in range(3):
        assert run("submit", "--detach", str(script)).exit_code == 0
    assert len(reads) == 1
    assert (env / "state" / "grants.json").exists()


def test_unreadable_grants_warn_and_submit_unchecked(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When sacctmgr fails, submit warns on stderr and dispatches on the configured ladder."""

    def failing(scheduler: object) -> Grants:
        raise SchedulerError("sacctmgr: slurmdbd is down")

    monkeypatch.setattr(ui_app, "read_grants", failing)
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    assert "could not read what the cluster grants (sacctmgr: slurmdbd is down)" in result.stderr
    assert json.loads(result.stdout)["qos"] == "high-eur"


# --------------------------------------------------------------------------- pinned, debug, injection
def test_pinned_submit_returns_once_queued(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--pin fellows returns with the queued job's handle (state, QoS, job id) while the job still pends."""
    scheduling_fake.scheduling = False
    result = run("submit", "--pin", "fellows", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["qos"], out["final"]) == ("SUBMITTED(high-eur)", "high-eur", False)
    assert scheduling_fake.jobs[out["slurm_job_id"]].state == "PENDING"
    text = run("submit", "--pin", "fellows", str(script))
    assert text.exit_code == 0, text.output
    assert "is queued on high-eur as SLURM job" in text.stdout


def test_pinned_submit_with_follow_stays_until_running(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """--pin fellows --follow stays in the foreground until the job runs."""
    result = run("submit", "--pin", "fellows", "--follow", "--json", str(script))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["state"] == "RUNNING"


def test_debug_intent_without_debug_qos_warns(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """--intent debug with no debug_qos warns that it walks the production ladder without the D_ prefix."""
    result = run("submit", "--intent", "debug", "--json", str(script))
    assert result.exit_code == 0, result.output
    assert "warning: --intent debug, but [fellows] debug_qos is not set" in result.stderr
    assert "'D_'" in result.stderr


# --------------------------------------------------------------------------- words a user sees
def test_a_handed_off_dispatch_reads_handed_off_not_failed(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """status says HANDED_OFF on lane gcp with no current QoS; --json keeps the machine's label and outcome."""
    scheduling_fake.scheduling = False
    out = json.loads(run("submit", "--json", str(script)).stdout)
    assert (out["state"], out["outcome"]) == ("FAILED_TO_GCP", "handed-off")
    table = run("status").stdout
    assert "HANDED_OFF" in table
    assert "FAILED_TO_GCP" not in table
    assert "low-eur" not in table


def test_a_refused_dispatch_reads_refused(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A first submit SLURM refuses exits 5, and status then says REFUSED, not SUBMITTED(high-eur)."""
    scheduling_fake.fail_next_submit(SubmitRejected("Requested node configuration is not available"))
    result = run("submit", str(script))
    refused(result, 5, "Requested node configuration is not available")
    table = run("status").stdout
    assert "REFUSED" in table
    assert "SUBMITTED(high-eur)" not in table


@pytest.mark.parametrize(("gpus", "words"), [(1, "(1 GPU,"), (8, "(8 GPUs,")], ids=["one", "eight"])
def test_gpu_counts_read_as_english(
    env: Path, scheduling_fake: SchedulingFake, script: Path, gpus: int, words: str
) -> None:
    """The live view says "1 GPU" and "8 GPUs"."""
    result = run("submit", "--gpus", str(gpus), str(script))
    assert result.exit_code == 0, result.output
    assert words in result.stdout


def test_status_shows_the_live_and_the_recent_dispatches_by_default(env: Path) -> None:
    """By default status lists every live dispatch and the 20 most recent, and says how many it left out."""
    ids = _journal_of(env, 30, live=2)
    rows = json.loads(run("status", "--json").stdout)
    assert [r["dispatch_id"] for r in rows] == ids[:2] + ids[-20:]
    table = run("status")
    assert table.exit_code == 0, table.output
    assert "22 of 30 dispatches shown (the live ones and the 20 most recent); --all shows every one" in table.stdout
    assert [r["dispatch_id"] for r in json.loads(run("status", "--json", "--last", "3").stdout)] == [
        *ids[:2],
        *ids[-3:],
    ]
    assert len(json.loads(run("status", "--json", "--all").stdout)) == 30
    assert [r["dispatch_id"] for r in json.loads(run("status", "--json", "--live").stdout)] == ids[:2]


def test_status_finds_a_dispatch_by_a_prefix_of_its_id(env: Path) -> None:
    """A unique prefix of an id selects that dispatch; a shared prefix is a usage error listing the matches."""
    ids = _journal_of(env, 12, live=0)
    [row] = json.loads(run("status", "11", "--json").stdout)
    assert row["dispatch_id"] == ids[11]
    result = run("status", "0")
    assert result.exit_code == 2
    assert "matches several dispatches" in result.stderr


@pytest.mark.parametrize("command", ["status", "history", "ladder"], ids=["status", "history", "ladder"])
def test_views_fit_80_columns(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """At 80 columns the status, history and ladder views keep every line within 80 and cut no word."""
    fill(scheduling_fake, "high-eur")
    walked = json.loads(run("submit", "--json", str(script)).stdout)["dispatch_id"]
    skipped = json.loads(run("submit", "--json", "--time", "10-00:00:00", str(script)).stdout)["dispatch_id"]
    monkeypatch.setenv("COLUMNS", "80")
    outputs = {
        "status": [run("status")],
        "history": [run("history", walked), run("history", skipped)],
        "ladder": [run("ladder", "--gpus", "32", "--time", "10-00:00:00")],
    }[command]
    for result in outputs:
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, result.stdout
        assert "…" not in result.stdout, result.stdout


def test_a_park_cap_under_two_polls_is_warned_about(env: Path) -> None:
    """A cap shorter than two poll intervals passes config check with a warning naming both values."""
    (env / "fellows.toml").write_text(_toml(env, fellows="park_cap_seconds = 5\npoll_interval_seconds = 10"))
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    assert "warning: [fellows] a park cap of 5 s is under two polls of 10 s" in result.stderr
    (env / "fellows.toml").write_text(_toml(env, fellows="park_cap_seconds = 600\npoll_interval_seconds = 10"))
    assert "park cap" not in run("config", "check").stderr


def test_status_all_prints_the_default_table_without_parsing_rows(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status --all (from the journal's listings) prints what status prints when every dispatch is shown, a
    handed-off one on its lane included, and parses no row's JSON."""
    scheduling_fake.scheduling = False
    run("submit", "--json", str(script))
    for _ in range(2):
        run("submit", "--detach", str(script))
    default = run("status")
    parsed = _count_parsed_rows(monkeypatch)
    every = run("status", "--all")
    assert every.exit_code == 0, every.output
    assert every.stdout == default.stdout
    assert "HANDED_OFF(gcp)" in every.stdout
    assert parsed == []


def test_history_of_a_prefix_parses_only_the_matching_row(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """history <prefix> on a journal of 30 dispatches parses one dispatch row: the one it shows."""
    ids = _journal_of(env, 30, live=0)
    parsed = _count_parsed_rows(monkeypatch)
    result = run("history", "11", "--json")
    assert result.exit_code == 0, result.output
    assert [e["trigger"] for e in json.loads(result.stdout)] == ["submit", "start"]
    assert parsed == [ids[11]]
