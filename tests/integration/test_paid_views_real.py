"""The views show the paid run, on the real local SLURM: a job whose one rung (high-eur, full) parks out is handed
to a paid lane (the fake paid lane, in this process: tests/unit/driver/test_paid.py's), which the test moves
QUEUED → RUNNING → SUCCEEDED; the command line's views, from processes of their own, show each paid state, its
GPU-hours and cost, and spend adds it up."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fellows_fsm.api import Fellows
from fellows_fsm.config.file import load_config
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.driver.reports import Progress
from fellows_fsm.testing import FakePaidLane

from .cli_harness import cli, json_of, ledger_config
from .conftest import Cluster

pytestmark = pytest.mark.slurm

CAP = 2.0
PRICE = 2.5


def wide() -> dict[str, str]:
    """This environment at a width that shows every column whole."""
    return {**os.environ, "COLUMNS": "200"}


def nap(seconds: float) -> None:
    """The follow's sleep between polls, never longer than half a second."""
    time.sleep(min(seconds, 0.5))


def test_each_paid_state_of_a_walk_on_the_real_cluster_is_shown_with_its_cost(slurm: Cluster, tmp_path: Path) -> None:
    """high-eur full, the job parks out of its one rung and is handed to the paid lane: status --json shows
    PAID_QUEUED with a ``paid`` object (nothing spent, the bound of 8 GPUs x 1 h at 2.5: 8 GPU-h, 20.00), then
    PAID_RUNNING (status shows its bound under the table), then PAID_DONE with what it ran; history ends with the
    run's cost; spend counts the run today, nothing left open; the rung's SLURM job was cancelled."""
    slurm.occupy("high-eur", 8, count=2)
    path = ledger_config(tmp_path, cap=CAP, poll=0.5, fellows="qos_ladder = []\n")
    config = load_config(path)
    gcp = config.lane_named("gcp")
    assert gcp is not None
    lane = FakePaidLane(gcp, price_per_gpu_hour=PRICE)
    spec = slurm.spec(time_limit=3600)
    with Fellows(config, lanes={"gcp": lane}) as fellows:
        d = fellows.submit(spec).dispatch_id

        def reached(state: str) -> bool:
            def check(_: Progress) -> bool:
                return fellows.handle(d).state == state

            return bool(fellows.follow(d, until=check, sleep=nap).state == state)

        assert reached("PAID_QUEUED")
        [queued] = json_of(cli(path, "status", d, "--json", timeout=60))
        assert (queued["state"], queued["lane"]) == ("PAID_QUEUED", "gcp")
        assert queued["paid"] == {
            "lane": "gcp",
            "status": "queued",
            "gpu_hours": 0.0,
            "cost": 0.0,
            "bound_gpu_hours": 8.0,
            "bound_cost": 20.0,
            "price_per_gpu_hour": PRICE,
            "running_at": None,
            "ended_at": None,
        }
        left = [r.state for r in slurm.queue() if r.job_id == queued["slurm_job_id"]]
        assert left in ([], ["CANCELLED"])  # its SLURM job was cancelled on the rung it parked out of

        lane.move(d, PaidStatus.RUNNING)
        assert reached("PAID_RUNNING")
        shown = cli(path, "status", d, timeout=60, env=wide())
        assert shown.returncode == 0, shown.stderr
        assert "PAID_RUNNING(gcp)" in shown.stdout
        assert any(
            line.startswith(f"{d} on gcp: ") and line.endswith("(≤ 8 GPU-h / ≤ 20.00)")
            for line in shown.stdout.splitlines()
        ), shown.stdout

        time.sleep(1.0)  # it runs a moment (followed by the polls), then the lane says it succeeded
        lane.move(d, PaidStatus.SUCCEEDED, "exit 0")
        fellows.watch(sleep=nap)  # (follow returns once a paid job runs: watch drives on until it ended)
        final = fellows.handle(d)
    assert (final.state, final.outcome) == ("PAID_DONE", "paid-succeeded")

    [done] = json_of(cli(path, "status", d, "--json", timeout=60))
    paid = done["paid"]
    assert paid["status"] == "succeeded"
    assert paid["ended_at"] is not None
    assert paid["running_at"] is not None
    assert 0 < paid["gpu_hours"] <= 8.0
    assert paid["cost"] == pytest.approx(PRICE * paid["gpu_hours"])

    history = cli(path, "history", d, timeout=60, env=wide())
    assert history.returncode == 0, history.stderr
    triggers = [line.split()[1] for line in history.stdout.splitlines() if len(line.split()) > 2]
    assert {"paid", "paid_start", "paid_end"} <= set(triggers)
    assert "paid run on gcp (PAID_DONE, succeeded): " in " ".join(history.stdout.split())

    spend = json_of(cli(path, "spend", "--json", timeout=60))
    today = spend["day"]["total"]
    assert (today["runs"], today["live"], today["open_gpu_hours"]) == (1, 0, 0.0)
    assert today["gpu_hours"] == pytest.approx(paid["gpu_hours"])
    assert spend["day"]["lanes"]["gcp"]["cost"] == pytest.approx(paid["cost"])
