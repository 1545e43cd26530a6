"""A program's cancel on the real local SLURM goes one way, through the inbox: journaled as a request, answered by
the journal's driver (the background driver while it runs; the program itself once it can take the lock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fellows_fsm import Fellows
from fellows_fsm.config.file import load_config
from fellows_fsm.journal.lock import lock_held

from .cli_harness import cli, json_of, read_journal, submit_args
from .conftest import Cluster
from .test_cli_real import _config

pytestmark = pytest.mark.slurm


def _pending_dispatch(slurm: Cluster, config: Path) -> tuple[str, str]:
    """A dispatch pinned to a full high-eur, left to the background driver: its id and its pending job's id."""
    slurm.occupy("high-eur", 8, count=2)
    detached = cli(config, *submit_args(slurm, "--detach", "--pin", "fellows"), timeout=60)
    assert detached.returncode == 0, detached.stderr
    dispatch_id = detached.stdout.strip()
    [row] = json_of(cli(config, "status", dispatch_id, "--json", timeout=60))
    job_id = str(row["slurm_job_id"])
    slurm.wait_for(lambda: slurm.row(job_id).reason == "QOSMaxGRESPerUser", "the job to pend on its cap")
    return dispatch_id, job_id


def test_a_programs_cancel_is_answered_by_the_background_driver_that_walks_it(slurm: Cluster, tmp_path: Path) -> None:
    """While the background driver walks a dispatch, Fellows.cancel in another process (no background) leaves a
    request for it and gets its answer: the job is cancelled on the cluster, the dispatch is withdrawn, and the
    program never took the driver lock."""
    config = _config(tmp_path)
    dispatch_id, job_id = _pending_dispatch(slurm, config)
    loaded = load_config(config)
    lock = loaded.journal_path.with_name(loaded.journal_path.name + ".lock")
    assert lock_held(lock)  # the background driver's
    with Fellows(loaded) as fellows:
        assert fellows.cancel(dispatch_id, wait=60) == [job_id]
        assert not fellows.driving
    slurm.wait_for(lambda: slurm.row(job_id).state == "CANCELLED", f"job {job_id} to be cancelled")
    journal = read_journal(tmp_path)
    try:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert (row.label, row.outcome) == ("WITHDRAWN", "withdrawn")
        assert not journal.meta_with_prefix("cancel")  # the request and its answer are gone
    finally:
        journal.close()


def test_a_programs_cancel_with_no_driver_running_is_answered_by_the_program_as_the_driver(
    slurm: Cluster, tmp_path: Path
) -> None:
    """With the background driver stopped, Fellows.cancel (no background) takes the lock and answers its own
    request as the journal's driver (it drives from then on): the job is cancelled, the dispatch withdrawn."""
    config = _config(tmp_path)
    dispatch_id, job_id = _pending_dispatch(slurm, config)
    stopped = cli(config, "driver", "stop", timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    with Fellows(load_config(config)) as fellows:
        assert not fellows.driving
        assert fellows.cancel(dispatch_id, wait=60) == [job_id]
        assert fellows.driving
        assert fellows.handle(dispatch_id).outcome == "withdrawn"
    slurm.wait_for(lambda: slurm.row(job_id).state == "CANCELLED", f"job {job_id} to be cancelled")
