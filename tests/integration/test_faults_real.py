"""Faults on the real local SLURM: other people's scancel and hold, a requeue, a stalled or forgetful controller,
a slow or runaway GCP command, Ctrl-C in the middle of sbatch, a watch run elsewhere, a journal pulled away.

After each, ``assert_settled`` checks the promise: every dispatch has exactly one job that ran or exactly one
handoff (or was withdrawn with nothing run), and none of its jobs is left pending.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.driver.reports import TickReport
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.slurm.port import SlurmScheduler
from fellows_fsm.slurm.runner import CommandRunner

from .cli_harness import (
    FELLOWS_FSM,
    cli,
    ctld_pid,
    ledger_config,
    read_journal,
    sbatch_running,
    start_cli,
    submit_args,
)
from .conftest import DEV_SLURM, Cluster
from .settled import LEDGER_CODE, assert_settled, jobs_of, ledger, walked, walked_out

pytestmark = pytest.mark.slurm


def ledger_lane(tmp_path: Path, *, before: str = "", timeout: float = 60) -> CommandSettings:
    """A gcp lane whose command (after running ``before``) appends the dispatch id to tmp_path/gcp.ledger."""
    code = before + "\n" + LEDGER_CODE if before else LEDGER_CODE
    return CommandSettings(
        name="gcp",
        command=(sys.executable, "-c", code, str(tmp_path / "gcp.ledger"), "{dispatch_id}"),
        timeout_seconds=timeout,
    )


@pytest.fixture
def make_router(tmp_path: Path) -> Iterator[Callable[..., Router]]:
    """A router on the real SLURM with short caps, a quick poll and a ledger gcp lane; journals closed after."""
    routers: list[Router] = []

    def make(*, cap: float = 3.0, poll: float = 0.5, lane: CommandSettings | None = None, **router: object) -> Router:
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=cap, poll_interval_seconds=poll),
            lanes=(lane or ledger_lane(tmp_path),),
            router=RouterConfig(**router),  # type: ignore[arg-type]
            state_dir=tmp_path / "state",
        )
        r = Router(config, SlurmScheduler(CommandRunner(timeout_seconds=20)), Journal(config.journal_path)).start()
        routers.append(r)
        return r

    yield make
    for r in routers:
        r.journal.close()


def run_until(router: Router, done: Callable[[], bool], *, timeout: float = 60) -> None:
    """Drive the router's own loop until ``done`` holds; fail (naming every dispatch) after ``timeout`` seconds."""
    end = time.monotonic() + timeout

    def until(_: TickReport) -> bool:
        if time.monotonic() > end:
            rows = ", ".join(f"{r.id}: {r.label} {r.qos} job {r.job_id}" for r in router.journal.dispatches())
            raise AssertionError(f"timed out after {timeout} s; {rows}")
        return done()

    router.run(until=until)


def dev_slurm(action: str) -> None:
    """Run a dev-slurm controller action (ctld-snapshot, ctld-rollback)."""
    done = subprocess.run([str(DEV_SLURM), action], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def cli_config(tmp_path: Path, name: str = "fellows.toml", *, cap: float = 3.0, lanes: bool = True) -> Path:
    """A config file for the command line (state in tmp_path/state); with or without the ledger gcp lane."""
    # park_early = "off": these faults need a job that waits out its window on a capped high-eur.
    return ledger_config(tmp_path, cap=cap, poll=0.5, park_early="off", lanes=lanes, name=name)


# --------------------------------------------------------------------------- a slow or runaway handoff
def test_a_slow_handoff_never_holds_up_another_dispatch(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """While one dispatch's 30 s GCP command runs, another walks high-eur -> normal-eur and runs, on time."""
    slurm.occupy("high-eur", 8, count=2)
    r = make_router(lane=ledger_lane(tmp_path, before="import time; time.sleep(30)"))
    never = r.dispatch(slurm.spec(gpus=8, time_limit=15 * 86_400)).dispatch_id  # over every rung's MaxWall
    run_until(r, lambda: never in r.running)
    walker = r.dispatch(slurm.spec(gpus=8, time_limit=600)).dispatch_id
    run_until(r, lambda: walked(r.handle(walker)))
    assert (r.handle(walker).state, r.handle(walker).qos) == ("RUNNING", "normal-eur")
    handoff = r.journal.handoff(never)
    assert handoff is not None
    assert handoff.status == "started"  # the slow command is still running: it held up nothing
    steps = r.journal.steps(walker)
    park = next(s for s in steps if s.trigger == "park")
    assert park.at - steps[0].at <= 3.0 + 2 * 0.5 + 1.0  # its cap, plus a poll to notice and one to act
    run_until(r, lambda: walked_out(r))  # the walker runs on, followed: not waited for
    assert ledger(tmp_path) == [never]
    assert_settled(slurm, r.journal, tmp_path, [never, walker])


def test_a_timed_out_handoff_is_killed_with_the_child_that_does_the_work(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """A GCP command that leaves the work to a child is killed as a whole group at its timeout: no late handoff."""
    child = f"import time; time.sleep(4); open({str(tmp_path / 'gcp.ledger')!r}, 'a').write('late\\n')"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(120)"
    lane = CommandSettings(name="gcp", command=(sys.executable, "-c", parent, "{dispatch_id}"), timeout_seconds=1)
    r = make_router(lane=lane)
    never = r.dispatch(slurm.spec(gpus=8, time_limit=15 * 86_400)).dispatch_id
    run_until(r, lambda: walked(r.handle(never)))
    handoff = r.journal.handoff(never)
    assert handoff is not None
    assert (handoff.status, handoff.exit_status) == ("failed", 124)
    time.sleep(5)  # longer than the child would have taken to "submit to GCP"
    assert ledger(tmp_path) == []
    alive = subprocess.run(["pgrep", "-f", str(tmp_path / "gcp.ledger")], capture_output=True, text=True, check=False)
    assert alive.stdout.strip() == ""
    assert not [j for j in jobs_of(slurm, never) if j.state == "PENDING" or j.ever_ran]


# --------------------------------------------------------------------------- other people's decisions
def test_an_outside_scancel_withdraws_the_dispatch_and_nothing_is_resubmitted(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """scancel of the dispatch's pending job by its owner ends it WITHDRAWN: no other rung, no GCP."""
    slurm.occupy("high-eur", 8, count=2)
    r = make_router(cap=5.0)
    h = r.dispatch(slurm.spec(gpus=8, time_limit=600))
    assert h.slurm_job_id is not None
    slurm.cancel(h.slurm_job_id)
    run_until(r, lambda: walked(r.handle(h.dispatch_id)))
    row = r.journal.dispatch(h.dispatch_id)
    assert row is not None
    assert (row.state, row.outcome) == ("WITHDRAWN", "withdrawn-outside")
    assert [j.job_id for j in jobs_of(slurm, h.dispatch_id)] == [h.slurm_job_id]
    assert "cancelled outside fellows-fsm" in r.journal.steps(h.dispatch_id)[-1].note
    assert_settled(slurm, r.journal, tmp_path, [h.dispatch_id])


def test_a_held_job_waits_past_its_cap_and_walks_only_after_release(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """scontrol hold keeps the dispatch on high-eur past its cap (never cancelled); after release it walks on.

    Without sbatch --deadline: SLURM's own deadline is not moved by a hold, so slurmctld may drop a job held past its
    window (DEADLINE; the dispatch is then withdrawn, a known limit in docs/design.md); this test is the router's part.
    """
    slurm.occupy("high-eur", 8, count=2)
    r = make_router(cap=2.0, controller_deadline=False)
    h = r.dispatch(slurm.spec(gpus=8, time_limit=600))
    assert h.slurm_job_id is not None
    subprocess.run(["scontrol", "hold", h.slurm_job_id], check=True, capture_output=True, timeout=20)
    started = time.monotonic()
    run_until(r, lambda: time.monotonic() - started > 3 * 2.0)
    assert r.handle(h.dispatch_id).state == "SUBMITTED(high-eur)"
    assert slurm.row(h.slurm_job_id).reason == "JobHeldAdmin"
    assert [j.job_id for j in jobs_of(slurm, h.dispatch_id)] == [h.slurm_job_id]
    subprocess.run(["scontrol", "release", h.slurm_job_id], check=True, capture_output=True, timeout=20)
    run_until(r, lambda: walked(r.handle(h.dispatch_id)))
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    triggers = [s.trigger for s in r.journal.steps(h.dispatch_id)]
    assert triggers[:3] == ["submit", "hold", "release"]
    assert_settled(slurm, r.journal, tmp_path, [h.dispatch_id])


def test_a_job_requeued_before_the_router_saw_it_run_is_never_run_twice(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """A job that ran and was requeued (PENDING, no batch host) counts as started: never cancelled nor resubmitted;
    it is followed pending where SLURM put it (REQUEUED: issue 38)."""
    r = make_router(cap=2.0)
    h = r.dispatch(slurm.spec(gpus=8, time_limit=600))
    assert h.slurm_job_id is not None
    slurm.wait_for(lambda: slurm.row(h.slurm_job_id or "").state == "RUNNING", "the job to start")
    subprocess.run(["scontrol", "requeue", h.slurm_job_id], check=True, capture_output=True, timeout=20)
    slurm.wait_for(lambda: slurm.row(h.slurm_job_id or "").state == "PENDING", "the requeued job to pend")
    run_until(r, lambda: walked(r.handle(h.dispatch_id)))
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).slurm_job_id) == ("REQUEUED", h.slurm_job_id)
    assert [s.trigger for s in r.journal.steps(h.dispatch_id)] == ["submit", "start", "requeue"]
    assert [j.job_id for j in jobs_of(slurm, h.dispatch_id)] == [h.slurm_job_id]
    assert ledger(tmp_path) == []


# --------------------------------------------------------------------------- the controller misbehaves
def test_a_stalled_controller_never_walks_a_job_past_a_free_rung(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """slurmctld stopped (SIGSTOP) for longer than the whole ladder: afterwards the job still gets normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    r = make_router(cap=3.0)
    r.scheduler.runner.timeout_seconds = 1.0  # type: ignore[attr-defined]
    h = r.dispatch(slurm.spec(gpus=8, time_limit=600))
    pid = ctld_pid()
    runner = r.scheduler.runner  # type: ignore[attr-defined]
    before = runner.calls["squeue"]
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        run_until(r, lambda: time.monotonic() - started > 12, timeout=60)  # 4 caps: past the worst case (9 s)
        stalled = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    # One squeue per 0.5 s poll at most, fewer with the back-off: the stalled controller is not hammered.
    assert runner.calls["squeue"] - before <= stalled / 0.5 + 1
    r.scheduler.runner.timeout_seconds = 20.0  # type: ignore[attr-defined]
    run_until(r, lambda: walked(r.handle(h.dispatch_id)))
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    assert "pause" in [s.trigger for s in r.journal.steps(h.dispatch_id)]
    assert ledger(tmp_path) == []
    assert_settled(slurm, r.journal, tmp_path, [h.dispatch_id])


def test_lost_sbatch_replies_are_looked_up_in_the_poll_s_one_squeue(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """Three first sbatch calls lose their replies (slurmctld stopped, the client's 1 s timeout), beside a dispatch
    whose job is queued: once slurmctld answers, the next poll runs one squeue (it lists the user's jobs and
    answers the three lookups; each lookup used to list them again: 4 calls), and no first submit is made twice."""
    slurm.occupy("high-eur", 8, count=2)  # high-eur self-capped: no job starts there, each stays for its lookup
    r = make_router(cap=60.0, poll=0.5)
    runner = r.scheduler.runner  # type: ignore[attr-defined]
    queued = r.dispatch(slurm.spec(gpus=1, time_limit=600))
    assert queued.slurm_job_id is not None
    pid = ctld_pid()
    runner.timeout_seconds = 1.0
    os.kill(pid, signal.SIGSTOP)
    try:
        lost = [r.dispatch(slurm.spec(gpus=1, time_limit=600)) for _ in range(3)]
    finally:
        os.kill(pid, signal.SIGCONT)
        runner.timeout_seconds = 20.0
    assert [h.slurm_job_id for h in lost] == [None] * 3  # no reply: each is looked up by its token, never resubmitted
    ids = [queued.dispatch_id, *(h.dispatch_id for h in lost)]
    time.sleep(1.0)  # slurmctld works through the sbatch requests it got while stopped (a poll comes later anyway)
    before = runner.calls["squeue"]
    r.poll()  # the first poll after: its observe of the queued job, and the three lookups
    assert runner.calls["squeue"] - before == 1, dict(runner.calls)
    assert all(r.handle(i).slurm_job_id is not None for i in ids), [r.journal.steps(i) for i in ids]
    for dispatch_id in ids:  # (high-eur is self-capped: park_early may walk a dispatch on; its first rung's job is one)
        jobs = jobs_of(slurm, dispatch_id)
        assert len([j for j in jobs if j.comment.endswith("-r0")]) == 1, jobs
        assert len([j for j in jobs if j.state in ("PENDING", "RUNNING")]) <= 1, jobs
    run_until(r, lambda: all(walked(r.handle(i)) for i in ids))  # (each runs on normal-eur: high-eur is capped)
    assert ledger(tmp_path) == []
    assert_settled(slurm, r.journal, tmp_path, ids)


def test_a_controller_restart_that_lost_the_job_and_reused_its_id(
    slurm: Cluster, make_router: Callable[..., Router], tmp_path: Path
) -> None:
    """slurmctld restarts on stale state: our job is gone and a stranger gets its id. The dispatch never adopts or
    cancels the stranger (not the router, not `fellows-fsm cancel`); it moves on and runs on normal-eur."""
    slurm.occupy("high-eur", 8, count=2)
    dev_slurm("ctld-snapshot")
    r = make_router(cap=30.0)
    h = r.dispatch(slurm.spec(gpus=8, time_limit=600))
    assert h.slurm_job_id is not None
    run_until(r, lambda: time.monotonic() > 0)  # one tick: it has seen its job pending
    dev_slurm("ctld-rollback")
    argv = ["sbatch", "--parsable", "--qos=normal-eur", "--gres=gpu:1", "--hold", "--comment=a-strangers-job"]
    stranger = subprocess.run(
        [*argv, *slurm.job_args(), slurm.script(300)], capture_output=True, text=True, check=True, timeout=20
    ).stdout.strip()
    assert stranger == h.slurm_job_id  # the controller handed our id to someone else
    run_until(r, lambda: walked(r.handle(h.dispatch_id)))
    assert (r.handle(h.dispatch_id).state, r.handle(h.dispatch_id).qos) == ("RUNNING", "normal-eur")
    assert "belongs to another job" in r.journal.steps(h.dispatch_id)[1].note
    assert slurm.row(stranger).state == "PENDING"  # untouched
    r.journal.close()
    config = cli_config(tmp_path)
    withdrawn = cli(config, "cancel", h.dispatch_id)
    assert withdrawn.returncode == 0, withdrawn.stderr
    assert slurm.row(stranger).state == "PENDING"  # still untouched by the user's cancel
    # the line names the jobs it cancelled (the dispatch id is hex and may contain the stranger's digits)
    _, _, cancelled = withdrawn.stdout.partition("SLURM jobs cancelled: ")
    assert cancelled, withdrawn.stdout
    assert stranger not in cancelled.rstrip(")\n").split(", ")


# --------------------------------------------------------------------------- the user's own shells
def test_ctrl_c_during_sbatch_stops_following_and_the_job_is_queued_once(slurm: Cluster, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the foreground group) of submit while the driver's sbatch waits on a stalled controller:
    exit 130 with one line saying the dispatch goes on; once the controller answers, the driver has queued the job
    exactly once and it runs. (It was: the submit itself ran sbatch and withdrew the dispatch; the process you
    interrupt no longer queues anything, so there is nothing to withdraw.)"""
    config = cli_config(tmp_path, cap=60.0)
    prepared = cli(config, "ladder")  # warms the grants cache, so the submit below goes straight to the driver
    assert prepared.returncode == 0, prepared.stderr
    pid = ctld_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        proc = start_cli(config, *submit_args(slurm, "--json"), start_new_session=True)
        slurm.wait_for(sbatch_running, "sbatch to be waiting on the stopped controller", timeout=30)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    _, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 130, stderr
    lines = [line for line in stderr.strip().splitlines() if "started the background driver" not in line]
    assert len(lines) == 1, stderr
    assert "goes on" in lines[0]
    journal = read_journal(tmp_path)
    [row] = journal.dispatches()

    def running() -> bool:
        found = journal.dispatch(row.id)
        return found is not None and walked(found)

    slurm.wait_for(running, "the driver to queue and start the job", timeout=60, tick=0.2)
    final = journal.dispatch(row.id)
    assert final is not None
    assert (final.state, final.qos) == ("RUNNING", "high-eur")
    assert len(jobs_of(slurm, row.id)) == 1
    assert_settled(slurm, journal, tmp_path, [row.id])
    journal.close()


def test_watch_from_another_directory_hands_off_with_the_dispatch_lane(slurm: Cluster, tmp_path: Path) -> None:
    """A dispatch submitted with a gcp lane is handed to it by a watch whose own config has no lane at all."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 8, count=4)  # the node's 64 GPUs are all busy: no rung can start the job
    original = cli_config(tmp_path, cap=2.0)
    submitted = cli(original, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bare = cli_config(tmp_path, "bare.toml", cap=2.0, lanes=False)
    watched = cli(bare, "watch", "--json", cwd=elsewhere)
    assert watched.returncode == 0, watched.stderr
    assert f"({dispatch_id}) were created with {original}" in watched.stderr  # watch says which config it keeps
    [done] = json.loads(watched.stdout)
    assert (done["dispatch_id"], done["lane"], done["outcome"]) == (dispatch_id, "gcp", "handed-off")
    assert ledger(tmp_path) == [dispatch_id]
    journal = read_journal(tmp_path)
    assert_settled(slurm, journal, tmp_path, [dispatch_id])
    journal.close()


# --------------------------------------------------------------------------- the journal pulled away
def test_a_deleted_state_dir_stops_watch_with_one_line_naming_the_job(slurm: Cluster, tmp_path: Path) -> None:
    """rm -rf of the state dir under a running watch: exit 7 with one line naming the dispatch and its job."""
    slurm.occupy("high-eur", 8, count=2)
    config = cli_config(tmp_path, cap=120.0)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    dispatch_id = submitted.stdout.strip()
    watch = start_cli(config, "watch")
    journal_path = tmp_path / "state" / "journal.sqlite3"
    slurm.wait_for(lambda: _has_open(watch.pid, journal_path), "watch to open the journal", timeout=60)
    shutil.rmtree(tmp_path / "state")
    _, stderr = watch.communicate(timeout=30)
    assert watch.returncode == 7, stderr
    line = stderr.strip().splitlines()[-1]
    assert "was deleted or replaced" in line
    assert dispatch_id in line
    [job] = jobs_of(slurm, dispatch_id)
    assert job.job_id in line
    assert job.state == "PENDING"  # left exactly as it was, for the user to decide


def test_a_read_only_journal_is_readable_but_not_driven(slurm: Cluster, tmp_path: Path) -> None:
    """A journal on a read-only mount can be read (status works) but not driven: exit 7 saying it is read-only."""
    slurm.occupy("high-eur", 8, count=2)
    config = cli_config(tmp_path, cap=120.0)
    submitted = cli(config, *submit_args(slurm, "--detach"))
    assert submitted.returncode == 0, submitted.stderr
    state = tmp_path / "state"

    def read_only(*args: str) -> subprocess.CompletedProcess[str]:
        """fellows-fsm in a mount namespace where the state dir is a read-only bind mount of itself."""
        script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
        argv = ["unshare", "--mount", "--", "bash", "-c", script, "ro", str(state), str(FELLOWS_FSM)]
        return subprocess.run(
            [*argv, "--config", str(config), *args], capture_output=True, text=True, timeout=60, check=False
        )

    status = read_only("status", "--json")
    assert status.returncode == 0, status.stderr
    assert [row["dispatch_id"] for row in json.loads(status.stdout)] == [submitted.stdout.strip()]
    watch = read_only("watch", "--once")
    assert watch.returncode == 7, watch.stderr
    assert len(watch.stderr.strip().splitlines()) == 1
    assert "is read-only for this user" in watch.stderr


def damage_journal(path: Path) -> None:
    """Checkpoint the journal into its main file, then write garbage over every page after the second."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    data[2 * 4096 :] = b"\xff" * (len(data) - 2 * 4096)
    path.write_bytes(bytes(data))


def test_a_damaged_journal_is_one_line_never_a_traceback(slurm: Cluster, tmp_path: Path) -> None:
    """Garbage over the journal's later pages: status exits 7 with one line that says to keep the file."""
    config = cli_config(tmp_path)
    for _ in range(3):
        assert cli(config, "submit", "--detach", "--pin", "gcp", slurm.script(1)).returncode == 0
    path = tmp_path / "state" / "journal.sqlite3"
    damage_journal(path)
    (tmp_path / "state" / "journal.sqlite3-wal").unlink(missing_ok=True)
    (tmp_path / "state" / "journal.sqlite3-shm").unlink(missing_ok=True)
    status = cli(config, "status")
    assert status.returncode == 7, status.stderr
    assert "Traceback" not in status.stderr
    assert "keep the file" in status.stderr.strip().splitlines()[-1]


def _has_open(pid: int, path: Path) -> bool:
    """Does process ``pid`` hold ``path`` open (one of its descriptors links to it)?"""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if fd.readlink() == path:
                return True
        except OSError:
            continue
    return False
