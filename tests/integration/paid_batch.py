"""The real-SLURM paid tests' shared setup: the Batch fake on loopback, a config with a gcp-batch lane on it, the
node filled so no rung can start a job, the background driver stopped after a test, and journal reads."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi

from .cli_harness import ledger_config, read_journal, stop_background_driver
from .conftest import Cluster

PARENT = "projects/proj-1/locations/us-central1"
"""Where the lane's Batch jobs are made (its project and region)."""


@pytest.fixture
def fake() -> Iterator[FakeBatchApi]:
    """The fake Batch API on a loopback port of this test's network namespace, stopped after the test."""
    with FakeBatchApi() as api:
        yield api


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[None]:
    """Stop the test's background driver after it (a paid job it follows keeps it alive; SIGCONT first: a test may
    leave it stopped)."""
    yield
    stop_background_driver(tmp_path, [signal.SIGCONT, signal.SIGTERM])


def batch_config(
    tmp_path: Path, fake: FakeBatchApi, *, budget: str = "", lane: str = "", name: str = "fellows.toml"
) -> Path:
    """Short caps, a 0.5 s poll, a gcp-batch lane on the fake (with ``lane``'s extra lines) and ``budget`` as the
    [budget] table's lines."""
    lines = (
        'kind = "gcp-batch"\nproject = "proj-1"\nregion = "us-central1"\naccelerator = "nvidia-h100-80gb"\n'
        f'price_per_gpu_hour = 11.06\napi_endpoint = "{fake.endpoint}"\n{lane}'
    )
    path = ledger_config(tmp_path, cap=1.0, poll=0.5, router="driver_idle_seconds = 5\n", lane=lines, name=name)
    if budget:
        path.write_text(path.read_text(encoding="utf-8") + f"\n[budget]\n{budget}", encoding="utf-8")
    return path


def fill_node(slurm: Cluster) -> None:
    """The node's 64 GPUs all busy with this user's other jobs: no rung can start an 8-GPU job."""
    slurm.occupy("high-eur", 8, count=2)
    slurm.occupy("normal-eur", 8, count=2)
    slurm.occupy("low-eur", 8, count=4)


def state_of(tmp_path: Path, dispatch_id: str) -> str | None:
    """The dispatch's state in the journal."""
    with read_journal(tmp_path) as journal:
        row = journal.dispatch(dispatch_id)
    return None if row is None else row.state
