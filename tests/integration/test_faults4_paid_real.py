"""The fourth round of faults on the real local SLURM (issue 36), around a paid job: the state dir filled while its
paid job is made, and what a command then tells the user (never to pay twice).

Each ends with ``assert_settled``: exactly one job that ran or exactly one paid handoff, nothing left pending.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_harness import cli, ledger_config, read_journal, stop_background_driver, submit_args
from .conftest import Cluster
from .settled import assert_settled, ledger
from .test_faults3_handoff_real import _fill_node, small_state_dir

pytestmark = pytest.mark.slurm

__all__ = ["small_state_dir"]  # a fixture, used by name


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    """Every background driver a test started is gone after it."""
    yield
    stop_background_driver(tmp_path, (signal.SIGCONT, signal.SIGTERM))


def _filling_lane(tmp_path: Path, state: Path) -> Path:
    """A config whose gcp lane makes the paid job (appends the dispatch id to the ledger), then fills the state dir's
    filesystem before it exits 0: the driver cannot journal how the handoff ended."""
    book = tmp_path / "gcp.ledger"
    code = f'echo "$1" >> {book}; cat /dev/zero > {state / "filler"} 2>/dev/null; exit 0'
    lane = f"command = {json.dumps(['sh', '-c', code, 'sh', '{dispatch_id}'])}\n"
    return ledger_config(tmp_path, cap=2.0, poll=0.5, park_early="off", router="driver_idle_seconds = 5\n", lane=lane)


@pytest.mark.parametrize("walk", [False, True], ids=["pinned", "walked"])
def test_a_disk_filled_during_the_paid_create_names_the_dispatch_and_never_says_submit_again(
    slurm: Cluster, tmp_path: Path, small_state_dir: Path, walk: bool
) -> None:
    """The gcp command makes the paid job, then fills the state dir: `submit` (pinned to gcp, or walked there) exits
    non-zero naming the dispatch, saying its paid job exists and not to submit it again; once space is freed,
    `watch` ends it HANDED_OFF with one paid handoff."""
    if walk:
        _fill_node(slurm)
    config = _filling_lane(tmp_path, small_state_dir)
    flags = () if walk else ("--pin", "gcp")
    done = cli(config, *submit_args(slurm, *flags), timeout=120)
    assert done.returncode == 7, done.stdout + done.stderr  # the full disk's code, said of the dispatch
    assert "Traceback" not in done.stderr
    [dispatch_id] = ledger(tmp_path)
    said = done.stdout + done.stderr
    assert dispatch_id in said, said
    assert "paid job" in said, said
    assert "do not submit it again" in said, said
    assert "run the command again" not in said, said
    assert "nothing is started or queued" not in said, said
    (small_state_dir / "filler").unlink()
    watched = cli(config, "watch", timeout=120)
    assert watched.returncode == 0, watched.stderr
    assert ledger(tmp_path) == [dispatch_id]
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
        assert row is not None
        assert row.state == "HANDED_OFF", row
        assert_settled(slurm, journal, tmp_path, [dispatch_id])
