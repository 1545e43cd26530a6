"""The Python API (fellows_fsm.Fellows) on the real local SLURM: it refuses what `fellows-fsm submit` refuses, with the
same line, before anything is journaled or queued; it works from any thread."""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
import pytest

from fellows_fsm import Fellows, Handle, JobSpec, TickReport, UsageError, load_config

from .cli_harness import cli, ledger_config, one_error, read_journal
from .conftest import Cluster
from .settled import assert_settled

pytestmark = pytest.mark.slurm

BAD = {
    # case: (the API's JobSpec fields, its submit's intent; the same through the CLI: options before the script, and
    # after --)
    "array": ({"extra": ("--array=0-2",)}, "prod", (), ("--array=0-2",)),
    "qos": ({"extra": ("--qos=low-eur",)}, "prod", (), ("--qos=low-eur",)),
    "wait": ({"extra": ("--wait",)}, "prod", (), ("--wait",)),
    "negative-gpus": ({"gpus": -3}, "prod", ("--gpus", "-3"), ()),
    "newline-name": ({"name": "train\nnow"}, "prod", ("--name", "train\nnow"), ()),
    "unknown-intent": ({}, "urgent", ("--intent", "urgent"), ()),
}


def _spec(slurm: Cluster, script: str, *, extra: tuple[str, ...] = (), **fields: object) -> JobSpec:
    """An 8-GPU, 10-minute job of ``script`` with the options every test job needs, then ``extra``, then ``fields``."""
    spec = JobSpec(name="train", script=script, gpus=8, time_limit_seconds=600, extra_args=(*slurm.job_args(), *extra))
    return attrs.evolve(spec, **fields)


def _nothing_left(slurm: Cluster, tmp_path: Path, before: list[str]) -> None:
    """No job was queued (squeue shows what it showed before) and the journal, if made, holds no dispatch."""
    assert [r.job_id for r in slurm.queue()] == before
    if (tmp_path / "state" / "journal.sqlite3").exists():
        journal = read_journal(tmp_path)
        try:
            assert journal.dispatches() == []
        finally:
            journal.close()


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_the_api_refuses_what_submit_refuses_with_the_same_line(slurm: Cluster, tmp_path: Path, case: str) -> None:
    """Each job `submit` refuses is refused by Fellows.submit too (UsageError, exit 2, the CLI's own line), and
    nothing is journaled or queued by either."""
    fields, intent, options, after = BAD[case]
    config = ledger_config(tmp_path, cap=5, poll=0.5)
    script = slurm.script(60)
    before = [r.job_id for r in slurm.queue()]
    with Fellows(load_config(config)) as fellows, pytest.raises(UsageError) as raised:
        fellows.submit(_spec(slurm, script, **fields), intent=intent)  # type: ignore[arg-type]
    _nothing_left(slurm, tmp_path, before)

    result = cli(config, "submit", "--gpus", "8", "--time", "10:00", *options, script, "--", *slurm.job_args(), *after)
    line = one_error(result, raised.value.exit_code)
    assert line == f"fellows-fsm: error: {raised.value}"
    assert "\n" not in str(raised.value)
    _nothing_left(slurm, tmp_path, before)


def test_a_gpu_count_as_text_is_one_usage_line_not_a_type_error(slurm: Cluster, tmp_path: Path) -> None:
    """gpus="8" is refused naming the value (UsageError, exit 2), not a TypeError from deep in the ladder."""
    config = ledger_config(tmp_path, cap=5, poll=0.5)
    before = [r.job_id for r in slurm.queue()]
    with Fellows(load_config(config)) as fellows, pytest.raises(UsageError, match=r"gpus '8' is not a GPU count"):
        fellows.submit(_spec(slurm, slurm.script(60), gpus="8"))
    _nothing_left(slurm, tmp_path, before)


def test_a_good_job_still_runs_through_the_api(slurm: Cluster, tmp_path: Path) -> None:
    """A job the check passes (with an sbatch option fellows-fsm does not own) is queued and runs on high-eur."""
    config = ledger_config(tmp_path, cap=5, poll=0.5)
    with Fellows(load_config(config)) as fellows:
        submitted = fellows.submit(_spec(slurm, slurm.script(60), extra=("--mem=100M",)))
        handle = fellows.follow(submitted.dispatch_id)
        assert (handle.state, handle.qos) == ("RUNNING", "high-eur")
        assert_settled(slurm, fellows.journal, tmp_path, [handle.dispatch_id])


def test_poll_and_status_from_a_second_thread_drive_and_read_the_dispatch(slurm: Cluster, tmp_path: Path) -> None:
    """A Fellows made and submitted in one thread is polled, read and followed from another (it once said the
    healthy journal was damaged); the job runs and the dispatch settles."""
    config = ledger_config(tmp_path, cap=5, poll=0.5)
    seen: dict[str, object] = {}
    with Fellows(load_config(config)) as fellows:
        submitted = fellows.submit(_spec(slurm, slurm.script(120)))

        def other_thread() -> None:
            try:
                seen["poll"] = fellows.poll()
                seen["status"] = [h.dispatch_id for h in fellows.status()]
                seen["history"] = [e.trigger for e in fellows.history(submitted.dispatch_id)]
                seen["followed"] = fellows.follow(submitted.dispatch_id)
            except BaseException as exc:  # the test reports whatever the thread raised
                seen["error"] = exc

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert "error" not in seen, seen.get("error")
        assert isinstance(seen["poll"], TickReport)
        assert seen["status"] == [submitted.dispatch_id]
        assert seen["history"][0] == "submit"
        assert isinstance(seen["followed"], Handle)
        assert (seen["followed"].state, seen["followed"].qos) == ("RUNNING", "high-eur")
        assert_settled(slurm, fellows.journal, tmp_path, [submitted.dispatch_id])


def test_status_from_another_thread_is_answered_while_follow_walks(slurm: Cluster, tmp_path: Path) -> None:
    """While one thread follows a dispatch off a full high-eur to normal-eur, another thread's status calls are
    answered between its polls (the dispatch seen on high-eur before it runs), and none fails."""
    slurm.occupy("high-eur", 8, count=2)
    config = ledger_config(tmp_path, cap=10, poll=0.5)
    states: list[str] = []
    errors: list[BaseException] = []
    done = threading.Event()
    with Fellows(load_config(config)) as fellows:
        submitted = fellows.submit(_spec(slurm, slurm.script(120)))

        def reader() -> None:
            while not done.is_set():
                try:
                    states.append(fellows.status(submitted.dispatch_id)[0].state)
                except BaseException as exc:  # the test reports whatever the thread raised
                    errors.append(exc)
                    return
                done.wait(0.05)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            handle = fellows.follow(submitted.dispatch_id)
        finally:
            done.set()
            thread.join(timeout=60)
        assert errors == []
        assert (handle.state, handle.qos) == ("RUNNING", "normal-eur")
        assert "SUBMITTED(high-eur)" in states
        assert_settled(slurm, fellows.journal, tmp_path, [submitted.dispatch_id])
