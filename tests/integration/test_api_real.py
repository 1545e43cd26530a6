"""The Python API (fellows_fsm.Fellows) on the real local SLURM: it refuses what `fellows-fsm submit` refuses, with the
same line, before anything is journaled or queued."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from fellows_fsm import Fellows, JobSpec, UsageError, load_config

from .cli_harness import cli, ledger_config, one_error, read_journal
from .conftest import Cluster
from .settled import assert_settled

pytestmark = pytest.mark.slurm

BAD = {
    # case: (what the API is given, the same job through the CLI: its options before the script, and after --)
    "array": ({"extra": ("--array=0-2",)}, (), ("--array=0-2",)),
    "qos": ({"extra": ("--qos=low-eur",)}, (), ("--qos=low-eur",)),
    "wait": ({"extra": ("--wait",)}, (), ("--wait",)),
    "negative-gpus": ({"gpus": -3}, ("--gpus", "-3"), ()),
    "newline-name": ({"name": "train\nnow"}, ("--name", "train\nnow"), ()),
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
    fields, options, after = BAD[case]
    config = ledger_config(tmp_path, cap=5, poll=0.5)
    script = slurm.script(60)
    before = [r.job_id for r in slurm.queue()]
    with Fellows(load_config(config)) as fellows, pytest.raises(UsageError) as raised:
        fellows.submit(_spec(slurm, script, **fields))  # type: ignore[arg-type]
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
