"""The dispatch commands of cli.py (submit, watch, status, history, cancel) through the entry point (CliRunner)
on the scheduling fake: what they queue, print and exit with, and how they share the journal with a driver."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from fellows_fsm.config.file import load_config
from fellows_fsm.journal.store import Journal
from fellows_fsm.scheduler.script import read_script_defaults
from fellows_fsm.testing import ThreadedDriver
from fellows_fsm.ui import submitting
from tests.unit.cli_helpers import (
    DISPATCH_KEYS,
    SchedulingFake,
    _config_text,
    fill,
    ledger,
    one_error_line,
    refused,
    run,
    world,
)


def test_submit_walks_to_normal_eur_and_prints_json(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """With the user's high-eur cap full, submit --json follows the dispatch to RUNNING on normal-eur (not final:
    followed to its end; no result yet)."""
    fill(scheduling_fake, "high-eur")
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out.keys() >= DISPATCH_KEYS
    assert (out["state"], out["lane"], out["qos"], out["final"]) == ("RUNNING", "fellows", "normal-eur", False)
    assert (out["result"], out["exit_code"]) == (None, None)
    assert scheduling_fake.jobs[out["slurm_job_id"]].qos == "normal-eur"
    assert ledger(env) == []


def test_submit_parks_out_of_every_rung_and_hands_off_to_gcp(
    env: Path, scheduling_fake: SchedulingFake, script: Path
) -> None:
    """When no rung ever starts the job, the gcp command runs once and submit exits 0 with lane gcp."""
    scheduling_fake.scheduling = False
    result = run("submit", "--json", str(script))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["state"], out["lane"], out["outcome"]) == ("HANDED_OFF", "gcp", "handed-off")
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
    """--detach prints only the dispatch id; watch --once shows it waiting on high-eur, watch follows it to its end
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
    scheduling_fake.run_seconds = 0.2  # its job completes: watch follows it to its end
    done = run("watch", "--json")
    assert done.exit_code == 0, done.output
    [out] = json.loads(done.stdout)
    assert (out["dispatch_id"], out["state"], out["qos"]) == (dispatch_id, "ENDED", "high-eur")
    assert (out["result"], out["exit_code"], out["final"]) == ("succeeded", 0, True)
    assert run("watch").stdout.startswith("no live dispatches")


def test_next_submit_drives_detached_dispatches(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """A submit that follows its own dispatch also drives the ones detached before it."""
    scheduling_fake.scheduling = False
    first = run("submit", "--detach", str(script)).stdout.strip()
    scheduling_fake.scheduling = True
    assert run("submit", str(script)).exit_code == 0
    [row] = json.loads(run("status", first, "--json").stdout)
    assert row["state"] == "RUNNING"


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
    got = read_script_defaults(path)
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


def test_unknown_pin_is_a_config_error(env: Path, script: Path) -> None:
    """--pin naming no configured lane exits 3 and lists the known lanes."""
    result = run("submit", "--pin", "runpod", str(script))
    assert result.exit_code == 3
    assert "known lanes: fellows, gcp" in one_error_line(result)


def test_unreachable_slurm_at_submit_exits_6(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When SLURM does not answer the first submit, submit exits 6 and the dispatch stays journaled for watch."""
    monkeypatch.setattr(submitting, "DETACH_WAIT_SECONDS", 0.5)  # how long submit waits for the driver's first sbatch
    scheduling_fake.unreachable = True
    result = run("submit", str(script))
    assert result.exit_code == 6
    assert "fellows-fsm watch" in one_error_line(result)
    [row] = json.loads(run("status", "--json").stdout)  # read while SLURM is still down: the driver cannot walk it
    assert (row["final"], row["slurm_job_id"]) == (False, None)
    scheduling_fake.unreachable = False


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


def _pending_detached(scheduling_fake: SchedulingFake, script: Path) -> str:
    """``submit --detach`` of ``script`` on a fake that does not schedule (its job stays pending on high-eur): the
    dispatch id. A 30 s cap, so that no driver walks it on before the test is done with it on a loaded machine (with
    0.3 s, CI once saw it parked and resubmitted before the test's cancel)."""
    config = script.parent / "fellows.toml"
    config.write_text(config.read_text().replace("park_cap_seconds = 0.3", "park_cap_seconds = 30"))
    scheduling_fake.scheduling = False
    return run("submit", "--detach", str(script)).stdout.strip()


def test_status_reads_while_another_router_drives(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """status works while the background driver holds the journal's driver lock, and starts no second one."""
    dispatch_id = _pending_detached(scheduling_fake, script)
    with contextlib.closing(Journal(load_config().journal_path, readonly=True)) as reader:
        assert reader.driver_alive()
    result = run("status", dispatch_id[:6], "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["dispatch_id"] == dispatch_id
    assert drivers.started == 1


def test_detach_while_another_router_drives_enqueues_without_queueing(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """submit --detach never queues a job itself: while a process that does not tick holds the lock, it waits
    for that driver's sbatch, exits 6 with the dispatch journaled, and the next driver queues the job."""
    monkeypatch.setattr(submitting, "DETACH_WAIT_SECONDS", 0.5)
    driver = Journal(load_config().journal_path)
    driver.acquire_driver()
    try:
        result = run("submit", "--detach", str(script))
    finally:
        driver.close()
    assert result.exit_code == 6, result.output
    [row] = json.loads(run("status", "--json").stdout)
    assert (row["state"], row["final"]) == ("SUBMITTED(high-eur)", False), row["outcome"]
    scheduling_fake.run_seconds = 0.2  # its job completes: watch follows it to its end
    done = run("watch", "--json")
    assert done.exit_code == 0, done.output
    assert [(d["dispatch_id"], d["state"]) for d in json.loads(done.stdout)] == [(row["dispatch_id"], "ENDED")]
    assert len(scheduling_fake.jobs) == 1


def test_watch_once_while_another_router_drives_says_who(
    env: Path, scheduling_fake: SchedulingFake, script: Path, drivers: ThreadedDriver
) -> None:
    """watch --once while the journal is driven elsewhere names the driver, polls nothing, and lists the dispatches."""
    dispatch_id = _pending_detached(scheduling_fake, script)
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


def test_cancel_withdraws_a_pending_dispatch(env: Path, scheduling_fake: SchedulingFake, script: Path) -> None:
    """cancel scancels the dispatch's job, marks it final (withdrawn), and a later watch never resubmits it."""
    dispatch_id = _pending_detached(scheduling_fake, script)
    [job] = scheduling_fake.jobs.values()
    result = run("cancel", dispatch_id)
    assert result.exit_code == 0, result.output
    assert job.state == "CANCELLED"
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"], row["outcome"]) == ("WITHDRAWN", True, "withdrawn")
    assert run("watch").stdout.startswith("no live dispatches")
    assert len(scheduling_fake.jobs) == 1
    history = json.loads(run("history", dispatch_id, "--json").stdout)
    assert history[-1]["trigger"] == "recall"  # the user's cancel is its own row of the table, journaled as such


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
    dispatch_id = _pending_detached(scheduling_fake, script)
    with contextlib.closing(Journal(load_config().journal_path, readonly=True)) as reader:
        assert reader.driver_alive()
    result = run("cancel", dispatch_id)
    assert result.exit_code == 0, result.output
    [job] = scheduling_fake.jobs.values()
    assert f"withdrawn (SLURM jobs cancelled: {job.job_id})" in result.stdout
    assert job.state == "CANCELLED"
    [row] = json.loads(run("status", dispatch_id, "--json").stdout)
    assert (row["state"], row["final"]) == ("WITHDRAWN", True)
    assert drivers.started == 1
