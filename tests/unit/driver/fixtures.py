"""The driver tests' shared setup: a router on the fake port and a fresh journal, with a gcp and a manual-only
runpod ledger lane, a frozen clock, and helpers to fill a rung's cap and drive until nothing is live."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

from fellows_fsm import FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.vocab import FOLLOWED_STATES
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.command.config import CommandSettings
from fellows_fsm.testing import FakePaidLane

CAP = 60.0


PRIORITY = {"dev-eur": 200000, "high-eur": 100000, "normal-eur": 50000, "low-eur": 10000}


SPEC = JobSpec(name="train", script="train.sbatch", gpus=8)


RECORD = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')"


def ledger_lane(name: str, ledger: Path, *, manual_only: bool = False, fail: bool = False) -> CommandSettings:
    """A command lane whose command appends the dispatch id to a ledger file (and can fail)."""
    code = RECORD + ("; sys.exit('quota exceeded in europe-west4')" if fail else "")
    return CommandSettings(
        name=name,
        command=(sys.executable, "-c", code, str(ledger), "{dispatch_id}"),
        manual_only=manual_only,
    )


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Frozen time for the router's clock."""
    with freeze_time("2026-11-30 12:00:00") as f:
        yield f


@pytest.fixture
def fake(frozen: FrozenDateTimeFactory) -> FakeScheduler:
    """A fake cluster with the fellows per-QoS GPU caps and 64 GPUs."""
    return FakeScheduler(
        qos_priority=PRIORITY, qos_gpu_caps={"high-eur": 16, "normal-eur": 16, "dev-eur": 8}, total_gpus=64
    )


MakeRouter = Callable[..., Router]


@pytest.fixture
def make_router(tmp_path: Path, fake: FakeScheduler) -> Iterator[MakeRouter]:
    """Build a started router on a fresh journal in tmp_path, by default on the ``fake`` port with a gcp and a
    manual-only runpod ledger lane (``lanes=`` replaces them, ``scheduler=`` the port); journals closed after."""
    routers: list[Router] = []

    def make(
        fellows: SlurmSettings | None = None,
        *,
        fail_gcp: bool = False,
        lanes: tuple[CommandSettings, ...] | None = None,
        scheduler: FakeScheduler | None = None,
        **router: object,
    ) -> Router:
        if lanes is None:
            lanes = (
                ledger_lane("gcp", tmp_path / "gcp.ledger", fail=fail_gcp),
                ledger_lane("runpod", tmp_path / "runpod.ledger", manual_only=True),
            )
        config = Config(
            fellows=fellows or SlurmSettings(park_cap_seconds=CAP),
            lanes=lanes,
            router=RouterConfig(**router),  # type: ignore[arg-type]
            state_dir=tmp_path,
        )
        journal = Journal(config.journal_path)
        try:
            r = Router(config, scheduler or fake, journal).start()
        except BaseException:
            journal.close()  # a refused router (e.g. a second driver) must not leave its connection open
            raise
        routers.append(r)
        return r

    yield make
    for r in routers:
        r.journal.close()


def ledger(tmp_path: Path, lane: str) -> list[str]:
    """The dispatch ids a ledger lane's command recorded."""
    path = tmp_path / f"{lane}.ledger"
    return path.read_text().split() if path.exists() else []


def drive(
    router: Router, fake: FakeScheduler, frozen: FrozenDateTimeFactory, *, step: float = 5, ticks: int = 200
) -> None:
    """Let the fake cluster schedule and the router poll until nothing is walked any more: every dispatch is final or
    its job runs (the walk's goal; the driver then follows it to its end: ``follow``)."""
    for _ in range(ticks):
        fake.schedule()
        frozen.tick(step)
        router.poll()
        if not router.busy or walked_out(router):
            return
        if router.running:
            time.sleep(0.02)  # a handoff command runs in real time while the router's clock is frozen
    raise AssertionError("dispatches still live after the tick budget")


def walked_out(router: Router) -> bool:
    """Is every dispatch the router drives final or running (nothing handing off, paid or on a rung)?"""
    others = router.handing or router.running or router.pending_handoffs or router.paid.busy
    return not others and all(d.state in FOLLOWED_STATES for d in router.live.values())


def follow(
    router: Router, fake: FakeScheduler, frozen: FrozenDateTimeFactory, *, step: float = 5, ticks: int = 200
) -> None:
    """Poll until nothing is live at all: every running job followed to its end (the test ends them)."""
    for _ in range(ticks):
        frozen.tick(step)
        router.poll()
        if not router.busy:
            return
    raise AssertionError("dispatches still live after the tick budget")


def fill(fake: FakeScheduler, qos: str, gpus: int = 16) -> None:
    """Run the user's own jobs so that ``qos`` is at its per-user GPU cap."""
    for _ in range(gpus // 8):
        fake.start(fake.add_job(JobSpec("load", "load.sbatch", gpus=8), qos=qos).job_id)


# ----------------------------------------------------------------- a paid lane followed (issue 27)
GCP_PAID = CommandSettings(name="gcp", command=("unused",))
"""The config's gcp lane; the router is given a FakePaidLane for it (what is journaled of the lane is this)."""


@pytest.fixture
def lane() -> FakePaidLane:
    """The paid lane every router of a test shares (its jobs outlive a router, as a cloud's do)."""
    return FakePaidLane(GCP_PAID, price_per_gpu_hour=2.5)


RouterOf = Callable[..., Router]


@pytest.fixture
def router_of(tmp_path: Path, fake: FakeScheduler, lane: FakePaidLane) -> Iterator[RouterOf]:
    """Start a router (with the given [budget] keys) on the test's journal, the fake cluster (nothing can start on
    it) and the fake paid lane; its journals are closed after the test."""
    fake.total_gpus = 0
    journals: list[Journal] = []

    def make(**budget: object) -> Router:
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=CAP),
            lanes=(GCP_PAID,),
            budget=BudgetConfig(**budget),  # type: ignore[arg-type]
            state_dir=tmp_path,
        )
        journals.append(Journal(config.journal_path))
        return Router(config, fake, journals[-1], lanes={"gcp": lane}).start()

    yield make
    for journal in journals:
        journal.close()


def ticks(r: Router, frozen: FrozenDateTimeFactory, n: int, step: float = 10) -> None:
    """Poll ``n`` times, ``step`` seconds apart."""
    for _ in range(n):
        frozen.tick(step)
        r.poll()
