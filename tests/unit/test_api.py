"""The Python API (fellows_fsm.Fellows) on the shipped fake port: driving, enqueueing, following, taking over."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import (
    Check,
    CommandSettings,
    Config,
    ConfigError,
    FakeScheduler,
    Fellows,
    FellowsError,
    Handle,
    JobSpec,
    JournalBusy,
    LaneError,
    Progress,
    SchedulerUnreachable,
    SlurmSettings,
    SubmitRejected,
    UsageError,
)
from fellows_fsm.journal.store import Journal
from fellows_fsm.slurm.accounting import Grants
from tests.unit.cli_helpers import LADDER_GRANTS

CAP = 60.0
POLL = 5.0
SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


@pytest.fixture(autouse=True)
def scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripts the specs name, in the current directory (a submit refuses a missing one, as the CLI does)."""
    monkeypatch.chdir(tmp_path)
    for name in ("train.sbatch", "big.sbatch"):
        (tmp_path / name).write_text("#!/bin/bash\nsleep 1\n", encoding="utf-8")


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """A ladder with 60 s caps and a 5 s poll, its journal in tmp_path, no fallback lane."""
    return Config(fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL), state_dir=tmp_path)


MakeFellows = Callable[..., Fellows]


@pytest.fixture
def make_fellows(config: Config, capped_fake: FakeScheduler) -> Iterator[MakeFellows]:
    """Build a Fellows on the fake port (each with its own journal handle, like another process); closed after."""
    made: list[Fellows] = []

    def make(**kwargs: object) -> Fellows:
        f = Fellows(config, scheduler=capped_fake, **kwargs)  # type: ignore[arg-type]
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def fill(fake: FakeScheduler, qos: str) -> None:
    """Run two of the user's own 8-GPU jobs on ``qos``, so its per-user GPU cap (16) is full."""
    for _ in range(2):
        fake.start(fake.add_job(JobSpec("load", "load.sbatch", gpus=8), qos=qos).job_id)


def cluster_sleep(
    frozen: FrozenDateTimeFactory, fake: FakeScheduler, *, then: Callable[[int], object] | None = None
) -> Callable[[float], None]:
    """A sleep for follow/watch: moves frozen time on, lets the fake cluster schedule, and calls ``then(n)``."""
    calls = [0]

    def sleep(seconds: float) -> None:
        calls[0] += 1
        frozen.tick(max(seconds, 0.01))
        fake.schedule()
        if then is not None:
            then(calls[0])

    return sleep


@pytest.fixture
def other_driver(config: Config) -> Iterator[Journal]:
    """Another process's hold on the journal's driver lock (a second handle in this process conflicts the same)."""
    journal = Journal(config.journal_path)
    journal.acquire_driver()
    yield journal
    journal.close()


# --------------------------------------------------------------------------- submit
def test_submit_drives_when_the_journal_is_free(make_fellows: MakeFellows, capped_fake: FakeScheduler) -> None:
    """With nobody driving the journal, submit takes the lock and queues the first job itself."""
    fellows = make_fellows()
    submitted = fellows.submit(SPEC)
    assert submitted.driving
    assert fellows.driving
    assert (submitted.handle.state, submitted.handle.qos) == ("SUBMITTED(high-eur)", "high-eur")
    [job] = capped_fake.jobs.values()
    assert (job.job_id, job.qos) == (submitted.handle.slurm_job_id, "high-eur")


def test_submit_enqueues_while_another_process_drives(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, other_driver: Journal
) -> None:
    """While another process holds the lock, submit journals the dispatch for it and queues nothing itself."""
    fellows = make_fellows()
    submitted = fellows.submit(SPEC)
    assert not submitted.driving
    assert fellows.driver == f"pid {os.getpid()} on {os.uname().nodename}"
    assert (submitted.handle.state, submitted.handle.slurm_job_id, submitted.handle.final) == (
        "SUBMITTED(high-eur)",
        None,
        False,
    )
    assert capped_fake.jobs == {}
    assert other_driver.steps(submitted.dispatch_id) == []


def test_submit_without_an_answer_raises_and_keeps_the_dispatch(
    make_fellows: MakeFellows, capped_fake: FakeScheduler
) -> None:
    """A first sbatch that gets no answer raises SchedulerUnreachable; the dispatch stays live in the journal."""
    capped_fake.fail_next_submit(SchedulerUnreachable("slurmctld did not answer"))
    fellows = make_fellows()
    with pytest.raises(SchedulerUnreachable, match="stays in the journal"):
        fellows.submit(SPEC)
    [handle] = fellows.status(live_only=True)
    assert (handle.final, handle.slurm_job_id) == (False, None)


def test_a_refused_first_submit_raises_and_ends_the_dispatch(
    make_fellows: MakeFellows, capped_fake: FakeScheduler
) -> None:
    """A first sbatch SLURM refuses raises SubmitRejected and the dispatch ends rejected, nothing queued."""
    capped_fake.fail_next_submit(SubmitRejected("Requested node configuration is not available"))
    fellows = make_fellows()
    with pytest.raises(SubmitRejected):
        fellows.submit(SPEC)
    [handle] = fellows.status()
    assert handle.final
    assert handle.outcome.startswith("rejected")
    assert isinstance(fellows.error(handle.dispatch_id), SubmitRejected)


def test_a_ladder_the_cluster_refuses_everywhere_ends_without_a_fallback(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """Every rung's QoS refused by sbatch is not a lost reply: submit returns, and the dispatch ends with no lane."""
    capped_fake.granted = frozenset()
    fellows = make_fellows()
    submitted = fellows.submit(SPEC)
    done = fellows.follow(submitted.dispatch_id, sleep=cluster_sleep(frozen, capped_fake))
    assert (done.final, done.outcome) == (True, "no-fallback-lane")
    assert isinstance(fellows.error(done.dispatch_id), LaneError)
    assert capped_fake.jobs == {}


# --------------------------------------------------------------------------- check
def test_check_skips_a_rung_the_job_can_never_fit(make_fellows: MakeFellows) -> None:
    """A 24-GPU job is over high-eur's and normal-eur's per-user cap: the check keeps low-eur and says why."""
    fellows = make_fellows(grants=lambda: LADDER_GRANTS)
    checked = fellows.check(JobSpec("big", "big.sbatch", gpus=24))
    assert checked.ladder is not None
    assert checked.ladder.qos_names == ("low-eur",)
    assert any("skipping high-eur" in note for note in checked.notes)


def test_check_refuses_a_qos_the_cluster_does_not_grant(make_fellows: MakeFellows, config: Config) -> None:
    """A ladder naming a QoS the grants do not hold is a ConfigError before anything is journaled."""
    fellows = make_fellows(grants=lambda: Grants(user="me", associations=(), qos={}))
    assert isinstance(fellows.check(SPEC).refused, ConfigError)
    with pytest.raises(ConfigError, match="high-eur"):
        fellows.submit(SPEC)
    assert fellows.status() == []


def test_check_warns_about_debug_without_debug_qos(make_fellows: MakeFellows) -> None:
    """--intent debug without debug_qos is a warning, and the job is not checked with no grants reader."""
    checked = make_fellows().check(SPEC, intent="debug")
    assert checked.ladder is None
    assert [w for w in checked.warnings if "debug_qos is not set" in w]


BAD_SPECS = {
    "array": (attrs.evolve(SPEC, extra_args=("--mem=4G", "--array=0-2")), "'--array=0-2'"),
    "qos": (attrs.evolve(SPEC, extra_args=("--qos=low-eur",)), "'--qos=low-eur'"),
    "wait": (attrs.evolve(SPEC, extra_args=("--wait",)), "'--wait'"),
    "negative-gpus": (attrs.evolve(SPEC, gpus=-3), "gpus -3"),
    "text-gpus": (attrs.evolve(SPEC, gpus="8"), "gpus '8'"),
    "bool-gpus": (attrs.evolve(SPEC, gpus=True), "gpus True"),
    "newline-name": (attrs.evolve(SPEC, name="a\nb"), "'a\\nb'"),
    "zero-time": (attrs.evolve(SPEC, time_limit_seconds=0), "time limit 0"),
    "float-time": (attrs.evolve(SPEC, time_limit_seconds=1.5), "time limit 1.5"),
    "missing-script": (attrs.evolve(SPEC, script="gone.sbatch"), "'gone.sbatch' does not exist"),
}


@pytest.mark.parametrize("case", list(BAD_SPECS), ids=list(BAD_SPECS))
def test_a_job_the_cli_refuses_is_refused_before_anything_is_journaled(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, case: str
) -> None:
    """check and submit (with any check argument) raise UsageError naming the value; nothing is journaled or queued."""
    spec, words = BAD_SPECS[case]
    fellows = make_fellows()
    for call in (
        lambda: fellows.check(spec),
        lambda: fellows.submit(spec),
        lambda: fellows.submit(spec, check=False),
        lambda: fellows.submit(spec, check=Check()),
    ):
        with pytest.raises(UsageError) as raised:
            call()
        assert words in str(raised.value)
        assert "\n" not in str(raised.value)
    assert fellows.status() == []
    assert capped_fake.jobs == {}


def test_a_script_line_the_cli_refuses_is_refused(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, tmp_path: Path
) -> None:
    """An `#SBATCH --array` line in the script is refused through the API too, naming the file and line."""
    (tmp_path / "array.sbatch").write_text("#!/bin/bash\n#SBATCH --array=0-2\nsleep 1\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"array\.sbatch:2"):
        make_fellows().submit(attrs.evolve(SPEC, script="array.sbatch"))
    assert capped_fake.jobs == {}


@pytest.mark.parametrize("value", ["--array=0-2", 5], ids=["one-string", "not-a-sequence"])
def test_extra_args_that_are_not_a_sequence_of_arguments_are_refused(value: object) -> None:
    """A single string (each letter would become an argument) or a number as extra_args is one UsageError line."""
    with pytest.raises(UsageError, match="extra_args"):
        JobSpec("train", "train.sbatch", extra_args=value)  # type: ignore[arg-type]


def test_check_refuses_an_unknown_intent(make_fellows: MakeFellows) -> None:
    """An intent other than prod or debug is a UsageError naming it (exit 2, as `submit --intent` says)."""
    with pytest.raises(UsageError, match="'urgent'"):
        make_fellows().check(SPEC, intent="urgent")


# --------------------------------------------------------------------------- follow
def test_follow_while_driving_walks_to_normal_eur(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """follow drives the dispatch off a full high-eur to RUNNING on normal-eur (not final: its job is followed to its
    end), reporting each state change."""
    fill(capped_fake, "high-eur")
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    states: list[str] = []
    ticks: list[Progress] = []
    done = fellows.follow(
        dispatch_id,
        on_change=lambda h: states.append(h.state),
        on_tick=ticks.append,
        sleep=cluster_sleep(frozen, capped_fake),
    )
    assert (done.state, done.qos, done.final) == ("RUNNING", "normal-eur", False)
    assert states[0] == "SUBMITTED(high-eur)"
    assert states[-1] == "RUNNING"
    assert "RESUBMITTED(normal-eur)" in states
    assert all(p.driving and p.report is not None for p in ticks)


def test_follow_reads_the_journal_until_the_driver_stops_then_drives(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory, other_driver: Journal
) -> None:
    """While another process drives, follow only reads the journal; once the lock is free it drives to RUNNING."""
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    observed: list[int] = []

    def release(n: int) -> None:
        if n == 3:
            observed.append(capped_fake.calls["observe"] + capped_fake.calls["submit"])
            other_driver.release_driver()

    ticks: list[Progress] = []
    done = fellows.follow(dispatch_id, on_tick=ticks.append, sleep=cluster_sleep(frozen, capped_fake, then=release))
    assert (done.state, done.qos) == ("RUNNING", "high-eur")
    assert observed == [0]  # three reads of the journal while the other process drove, no SLURM call
    assert [p.driving for p in ticks[:3]] == [False, False, False]
    assert str(ticks[0].driver).startswith(f"pid {os.getpid()} ")
    assert ticks[-1].driving


def test_a_takeover_finishes_the_dispatch_of_a_driver_that_died(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """When the driving process stops mid-walk, the follower takes over and finishes both walking dispatches, and
    does not wait for a dispatch pinned on a full rung."""
    fill(capped_fake, "high-eur")
    first = make_fellows()
    orphan = first.submit(SPEC).dispatch_id
    pinned = first.submit(SPEC, pin="fellows").dispatch_id
    second = make_fellows()
    mine = second.submit(SPEC).dispatch_id
    assert not second.driving
    first.close()  # the driver is gone (the kernel frees a dead process's flock the same way)
    done = second.follow(mine, sleep=cluster_sleep(frozen, capped_fake))
    assert (done.state, done.qos) == ("RUNNING", "normal-eur")
    assert (second.handle(orphan).state, second.handle(orphan).qos) == ("RUNNING", "normal-eur")
    assert (second.handle(pinned).state, second.handle(pinned).final) == ("SUBMITTED(high-eur)", False)


def test_follow_of_a_final_dispatch_returns_without_taking_the_lock(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, other_driver: Journal
) -> None:
    """Following a dispatch that is already final returns its handle at once and leaves the lock alone."""
    first = make_fellows()
    other_driver.release_driver()
    capped_fake.fail_next_submit(SubmitRejected("Requested node configuration is not available"))
    with pytest.raises(SubmitRejected):
        first.submit(SPEC)
    first.close()
    other_driver.acquire_driver()
    fellows = make_fellows()
    [row] = fellows.status()
    handle = fellows.follow(row.dispatch_id, sleep=lambda _: pytest.fail("follow waited on a final dispatch"))
    assert handle.final
    assert not fellows.driving


def test_follow_stops_when_until_says_so(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, other_driver: Journal
) -> None:
    """until() ends a read-only follow before the dispatch is final."""
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    handle = fellows.follow(dispatch_id, until=lambda p: not p.driving, sleep=lambda _: None)
    assert not handle.final
    assert capped_fake.jobs == {}


def test_a_lane_pinned_dispatch_is_handed_off_once_by_the_process_that_takes_over(
    tmp_path: Path, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """A --pin gcp dispatch enqueued while another process drives is handed off once, by the follower that takes
    the journal over when that process stops."""
    record = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"
    gcp = CommandSettings(
        name="gcp", command=(sys.executable, "-c", record, str(tmp_path / "gcp.ledger"), "{dispatch_id}")
    )
    config = Config(fellows=SlurmSettings(park_cap_seconds=CAP), lanes=(gcp,), state_dir=tmp_path)
    with Fellows(config, scheduler=capped_fake) as first, Fellows(config, scheduler=capped_fake) as second:
        assert first.drive()
        submitted = second.submit(SPEC, pin="gcp")
        assert not submitted.driving
        first.close()

        def sleep(seconds: float) -> None:
            frozen.tick(seconds)
            time.sleep(0.01)  # the lane's command is a real process

        done = second.follow(submitted.dispatch_id, sleep=sleep)
    assert (done.state, done.lane, done.final) == ("HANDED_OFF", "gcp", True)
    assert (tmp_path / "gcp.ledger").read_text().split() == [submitted.dispatch_id]
    assert capped_fake.jobs == {}


# --------------------------------------------------------------------------- watch, poll
def test_watch_takes_over_and_drives_every_live_dispatch(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory, other_driver: Journal
) -> None:
    """watch follows while another process drives, then drives every enqueued dispatch to RUNNING and follows each
    job to its end."""
    fellows = make_fellows()
    ids = [fellows.submit(SPEC).dispatch_id for _ in range(2)]

    def release(n: int) -> None:
        if n == 2:
            other_driver.release_driver()
        for job in capped_fake.live_jobs(token_prefix="fsm-"):
            if job.state == "RUNNING" and n >= 4:
                capped_fake.end(job.job_id)

    handles = fellows.watch(sleep=cluster_sleep(frozen, capped_fake, then=release))
    assert sorted(h.dispatch_id for h in handles) == sorted(ids)
    assert {(h.state, h.result) for h in handles} == {("ENDED", "succeeded")}


def test_poll_is_none_while_another_process_drives(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, other_driver: Journal
) -> None:
    """poll() makes no SLURM call and returns None while the journal is driven elsewhere."""
    fellows = make_fellows()
    fellows.submit(SPEC)
    assert fellows.poll() is None
    assert sum(capped_fake.calls.values()) == 0


# --------------------------------------------------------------------------- status, history, cancel
def test_status_and_history_read_the_journal(make_fellows: MakeFellows, capped_fake: FakeScheduler) -> None:
    """status finds a dispatch by a prefix of its id; history lists its submit step."""
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    [handle] = fellows.status(dispatch_id[:5])
    assert isinstance(handle, Handle)
    assert handle.dispatch_id == dispatch_id
    assert [(e.trigger, e.qos) for e in fellows.history(dispatch_id)] == [("submit", "high-eur")]
    with pytest.raises(UsageError, match="fellows-fsm status"):
        fellows.status("nosuch")


def test_cancel_while_driving_withdraws_for_good(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, frozen: FrozenDateTimeFactory
) -> None:
    """cancel scancels the job and marks the dispatch withdrawn; the driving router never advances it again."""
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    [job] = capped_fake.jobs.values()
    assert fellows.cancel(dispatch_id) == [job.job_id]
    assert job.state == "CANCELLED"
    assert fellows.driving
    frozen.tick(CAP * 4)
    fellows.poll()
    assert len(capped_fake.jobs) == 1
    assert (fellows.handle(dispatch_id).state, fellows.handle(dispatch_id).outcome) == ("WITHDRAWN", "withdrawn")
    error = fellows.error(dispatch_id)
    assert isinstance(error, FellowsError)
    assert "withdrawn" in str(error)


def test_cancel_needs_the_driver_lock(
    make_fellows: MakeFellows, capped_fake: FakeScheduler, other_driver: Journal
) -> None:
    """cancel while another process holds the lock and never answers raises JournalBusy (exit 7) naming it, and
    scancels nothing (the request stays journaled for that driver)."""
    fellows = make_fellows()
    dispatch_id = fellows.submit(SPEC).dispatch_id
    with pytest.raises(JournalBusy) as raised:
        fellows.cancel(dispatch_id, wait=0.3)
    assert raised.value.exit_code == 7
    assert f"pid {os.getpid()}" in str(raised.value)
    assert not fellows.handle(dispatch_id).final


def test_a_given_check_is_used_as_is(make_fellows: MakeFellows, capped_fake: FakeScheduler) -> None:
    """submit(check=Check(...)) journals that check's note on the first step, without reading grants again."""
    fellows = make_fellows(grants=lambda: pytest.fail("grants read again"))
    submitted = fellows.submit(SPEC, check=Check(note="checked elsewhere"))
    assert [e.note for e in fellows.history(submitted.dispatch_id)] == ["checked elsewhere"]


def test_cancel_from_a_fellows_that_can_drive_is_answered_through_the_inbox_by_the_driver_it_becomes(
    make_fellows: MakeFellows, capped_fake: FakeScheduler
) -> None:
    """A Fellows that does not drive yet, on a journal nobody drives, delivers its cancel as a request like any
    command: it takes the lock (it drives from then on, as submit would) and its router answers it; the request and
    its answer are gone from the journal after."""
    first = make_fellows()
    dispatch_id = first.submit(SPEC, check=False).dispatch_id
    [job] = capped_fake.jobs.values()
    first.close()  # the driving process stops; the dispatch stays live
    canceller = make_fellows()
    assert not canceller.driving
    assert canceller.cancel(dispatch_id) == [job.job_id]
    assert job.state == "CANCELLED"
    assert canceller.driving
    assert canceller.handle(dispatch_id).outcome == "withdrawn"
    assert not canceller.journal.meta_with_prefix("cancel")


def test_a_driver_that_does_not_start_names_the_journaled_dispatch(tmp_path: Path) -> None:
    """Fellows.submit in background mode whose driver fails to start says which dispatch is journaled, never
    'submit again'."""
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\nsleep 1\n", encoding="utf-8")
    config = Config(fellows=SlurmSettings(park_cap_seconds=60), state_dir=tmp_path / "state")

    def no_driver(config: Config, journal: Journal) -> None:
        if not journal.live_after(0)[1]:
            return  # nothing to drive yet: none started, as ensure_driver does
        raise FellowsError("the background driver of journal did not start within 10 s")

    with Fellows(config, scheduler=FakeScheduler(), background=True, start_driver=no_driver) as fellows:
        with pytest.raises(FellowsError) as raised:
            fellows.submit(JobSpec("train", str(script), gpus=8), check=False)
        assert fellows.enqueued is not None
        message = str(raised.value)
        assert f"dispatch {fellows.enqueued} is journaled" in message
        assert "do not submit it again" in message
        assert "did not start within 10 s" in message
