"""A third paid kind is one folder (kind.py here) and one registry line: the unchanged router walks a dispatch to
it on the fake SLURM port, follows its job to its end, and a cancel deletes it, with no src file naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec
from fellows_fsm.config.file import Config, config_mapping
from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes import registry

from . import kind

SRC = Path(__file__).resolve().parents[4] / "src" / "fellows_fsm"
CONFIG = {
    "fellows": {"park_cap_seconds": 60},
    "lanes": {"books": {"kind": "abacus", "price_per_gpu_hour": 3.0}},
    "router": {"order": ["fellows", "books"]},
}


@pytest.fixture
def router(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[Router, FrozenDateTimeFactory]]:
    """The abacus kind registered (its one line), and the real router on a fake cluster where nothing starts."""
    monkeypatch.setitem(registry.KINDS, kind.KIND, kind.AbacusKind())
    kind.CLOUD.clear()
    kind.DELETED.clear()
    config = Config.from_mapping({**CONFIG, "state_dir": str(tmp_path)}, source="abacus.toml")
    journal = Journal(config.journal_path)
    with freeze_time("2026-11-30 12:00:00") as frozen:
        try:
            yield Router(config, FakeScheduler(total_gpus=0), journal).start(), frozen
        finally:
            journal.close()


def _to_paid(r: Router, frozen: FrozenDateTimeFactory) -> str:
    """Dispatch a job and poll until it is handed to the abacus (PAID_QUEUED)."""
    d = r.dispatch(JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200)).dispatch_id
    for _ in range(40):
        frozen.tick(30.0)
        r.poll()
        if r.handle(d).state == "PAID_QUEUED":
            return d
    raise AssertionError(f"never handed to the abacus: {r.handle(d).state}")


def test_the_abacus_kind_loads_and_journals_its_own_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered by one line, the kind's table loads, reads back from what the journal keeps, and says what it
    can do (followed, priced) to the code that asks."""
    monkeypatch.setitem(registry.KINDS, kind.KIND, kind.AbacusKind())
    config = Config.from_mapping({**CONFIG, "state_dir": str(tmp_path)}, source="abacus.toml")
    lane = config.lane("books")
    assert (lane.kind, lane.follows, lane.price_per_gpu_hour, lane.walks_ladder) == ("abacus", True, 3.0, False)
    assert Config.from_mapping(config_mapping(config)).lanes == config.lanes


def test_a_dispatch_walks_to_the_abacus_and_is_followed_to_its_end(
    router: tuple[Router, FrozenDateTimeFactory],
) -> None:
    """After every rung parks, the dispatch is handed to the abacus once, followed while it runs, and ends
    PAID_DONE with its cost at the abacus's price."""
    r, frozen = router
    d = _to_paid(r, frozen)
    assert list(kind.CLOUD) == [d]
    kind.CLOUD[d] = PaidLook(PaidStatus.RUNNING)
    frozen.tick(10.0)
    r.poll()
    assert r.handle(d).state == "PAID_RUNNING"
    frozen.tick(360.0)
    r.poll()
    kind.CLOUD[d] = PaidLook(PaidStatus.SUCCEEDED, "exit 0")
    frozen.tick(10.0)
    r.poll()
    row = r.journal.dispatch(d)
    assert row is not None
    assert (row.state, row.final) == ("PAID_DONE", True)
    run = r.journal.paid_run(d)
    assert run is not None
    assert run.lane == "books"
    assert run.gpu_hours(0) > 0
    assert run.cost(0) == pytest.approx(3.0 * run.gpu_hours(0))


def test_a_cancel_deletes_the_abacus_job_once(router: tuple[Router, FrozenDateTimeFactory]) -> None:
    """A user's cancel of the abacus's running job journals WITHDRAWN and deletes the entry exactly once."""
    r, frozen = router
    d = _to_paid(r, frozen)
    kind.CLOUD[d] = PaidLook(PaidStatus.RUNNING)
    frozen.tick(10.0)
    r.poll()
    assert r.withdraw(d) == [f"fsm-{d}@books"]
    for _ in range(3):
        frozen.tick(10.0)
        r.poll()
    row = r.journal.dispatch(d)
    assert row is not None
    assert row.state == "WITHDRAWN"
    assert [d] == kind.DELETED
    assert d not in kind.CLOUD


def test_no_src_file_names_the_abacus_kind() -> None:
    """The kind lives in its folder alone: no module of the package names it."""
    named = [p for p in SRC.rglob("*.py") if "abacus" in p.read_text(encoding="utf-8").lower()]
    assert named == []
