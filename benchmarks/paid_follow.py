"""Benchmark: Batch API calls of the paid follow, per poll interval, for 1 to 1,000 paid dispatches of one lane.

The real Router on the shipped FakeScheduler (nothing ever starts, so every dispatch walks the whole ladder) with a
``gcp-batch`` lane whose API endpoint is the loopback fake of the Batch API (testing_batch.FakeBatchApi, reached
through Google's own client library), on a simulated clock (sim/clock.py: it moves only when this script moves it).
``N`` dispatches walk every rung and are handed to the lane (N creates); once every one is PAID_QUEUED, the fake
moves every other job to RUNNING, and the router polls ``--polls`` times, one poll interval apart, with one extra
poll half an interval after each (a poll that must not look again). Per poll: the fake's list requests (the
target: exactly 1 per interval, 0 in the half-interval poll, whatever N), the wall time of the lane's ``look``
(the list call and its mapping to the dispatches) and of the whole ``Router.poll``. Then every dispatch is
cancelled (``Router.withdraw``): the fake's delete requests (the target: one per job), counted again after
``--polls`` more polls (no delete asked twice, no list any more).

    .venv/bin/python -m benchmarks.paid_follow [--sizes 1,10,100,1000] [--polls 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks.common import spread, write_result
from fellows_fsm.config.file import Config, RouterConfig
from fellows_fsm.core.paid import PaidLook
from fellows_fsm.driver.router import Router
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.gcp_batch.config import GcpBatchSettings
from fellows_fsm.lanes.gcp_batch.fake import FakeBatchApi
from fellows_fsm.lanes.gcp_batch.lane import GcpBatchLane
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.sim.clock import SimClock

POLL = 10.0
"""The poll interval (seconds of the simulated clock)."""
CAP = 30.0
"""Every rung's park cap: a dispatch reaches the paid lane about 9 polls after its submit."""
SCRIPT = "#!/bin/bash\n#SBATCH --gres=gpu:8\n#SBATCH --time=2:00:00\npython train.py\n"
TABLE_PARENT = "projects/proj-1/locations/us-central1"
TABLE = {"project": "proj-1", "region": "us-central1", "accelerator": "nvidia-h100-80gb", "price_per_gpu_hour": 11.06}


class TimedLane(GcpBatchLane):
    """The gcp-batch lane, its ``look`` timed (wall seconds of each call, in order): the code the driver runs."""

    def __init__(self, settings: GcpBatchSettings) -> None:
        super().__init__(settings)
        self.look_seconds: list[float] = []

    def look(self, dispatch_ids: Sequence[str]) -> dict[str, PaidLook]:
        started = time.perf_counter()
        try:
            return super().look(dispatch_ids)
        finally:
            self.look_seconds.append(time.perf_counter() - started)


def states(journal: Journal) -> Counter[str]:
    """How many live dispatches are in each state."""
    return Counter(row.state for row in journal.dispatches(live_only=True))


def to_paid(router: Router, clock: SimClock, size: int) -> dict[str, Any]:
    """Walk every live dispatch to PAID_QUEUED: the clock moves one poll interval a poll, and stands still while a
    create is under way (its thread talks to the fake in real time), so no create runs past its timeout."""
    polls, started = 0, time.perf_counter()
    while True:
        now = states(router.journal)
        if now == Counter({"PAID_QUEUED": size}):
            break
        if polls > 10_000:
            raise RuntimeError(f"the dispatches never all reached PAID_QUEUED: {dict(now)}")
        if now.get("HANDING_OFF"):
            time.sleep(0.05)
        else:
            clock.advance_to(clock.now() + POLL)
        router.poll()
        polls += 1
    return {"polls": polls, "wall_seconds": round(time.perf_counter() - started, 2)}


def raw_list(fake: FakeBatchApi, size: int) -> dict[str, Any]:
    """The same list request as plain HTTP, no client library (its bytes and wall seconds, min of 3): how much of a
    look is the request itself, and how much the library's parsing of it."""
    host, port = fake.endpoint.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    wanted = quote('labels.fellows_fsm_lane="gcp"')
    path = f"/v1/{TABLE_PARENT}/jobs?pageSize=1000&filter={wanted}"
    walls, size_bytes = [], 0
    try:
        for _ in range(3):
            started = time.perf_counter()
            connection.request("GET", path)
            body = connection.getresponse().read()
            walls.append(time.perf_counter() - started)
            size_bytes = len(body)
    finally:
        connection.close()
    return {"jobs_listed": min(size, 1000), "bytes": size_bytes, "min_wall_seconds": round(min(walls), 4)}


def measure(size: int, polls: int) -> dict[str, Any]:
    """``size`` paid dispatches of one gcp-batch lane followed for ``polls`` intervals, then all cancelled."""
    clock = SimClock(time.time())
    with FakeBatchApi(clock=clock) as fake, tempfile.TemporaryDirectory(prefix="fellows-paid-") as work:
        Path(work, "train.sbatch").write_text(SCRIPT, encoding="utf-8")
        settings = GcpBatchSettings.from_table("gcp", {**TABLE, "api_endpoint": fake.endpoint})
        config = Config(
            fellows=SlurmSettings(park_cap_seconds=CAP, poll_interval_seconds=POLL),
            lanes=(settings,),
            router=RouterConfig(max_rung_changes_per_tick=max(20, size)),
            state_dir=Path(work, "state"),
        )
        lane = TimedLane(settings)
        journal = Journal(config.journal_path)
        router = Router(config, FakeScheduler(clock, total_gpus=0), journal, clock=clock, lanes={"gcp": lane})
        router.start()
        spec = JobSpec(name="train", script="train.sbatch", gpus=8, time_limit_seconds=7200, workdir=work)
        ids = [router.dispatch(spec).dispatch_id for _ in range(size)]
        walk = to_paid(router, clock, size)
        creates = fake.calls["create"]
        for dispatch_id in ids[::2]:
            fake.move(f"fsm-{dispatch_id}", "RUNNING", run_seconds=60.0)
        clock.advance_to(clock.now() + POLL)
        router.poll()  # (not counted: it sees the running half start, and puts the looks on this cadence)
        lane.look_seconds.clear()
        lists, half_lists, poll_seconds = [], [], []
        before_looks = router.paid.looks
        for _ in range(polls):
            clock.advance_to(clock.now() + POLL / 2)  # half an interval after the last look: no look now
            listed = fake.calls["list"]
            router.poll()
            half_lists.append(fake.calls["list"] - listed)
            clock.advance_to(clock.now() + POLL / 2)  # one interval after it: one look
            listed = fake.calls["list"]
            started = time.perf_counter()
            router.poll()
            poll_seconds.append(time.perf_counter() - started)
            lists.append(fake.calls["list"] - listed)
        live = states(journal)
        raw = raw_list(fake, len(ids))
        deleted, listed = fake.calls["delete"], fake.calls["list"]
        started = time.perf_counter()
        for dispatch_id in ids:
            router.withdraw(dispatch_id)
        cancel_seconds = time.perf_counter() - started
        deletes = fake.calls["delete"] - deleted
        for _ in range(polls):
            clock.advance_to(clock.now() + POLL)
            router.poll()
        after = {
            "deletes": fake.calls["delete"] - deleted,
            "lists": fake.calls["list"] - listed,
            "states": dict(states(journal)),
            "withdrawn": sum(1 for row in journal.dispatches() if row.state == "WITHDRAWN"),
            "jobs_deleting": sum(1 for job in fake.jobs.values() if job["status"]["state"] == "DELETION_IN_PROGRESS"),
        }
        result = {
            "paid_dispatches": size,
            "polls": polls,
            "poll_interval_seconds": POLL,
            "walk_to_paid": walk,
            "creates": creates,
            "live_while_followed": dict(live),
            "lists_per_interval": spread([a + b for a, b in zip(lists, half_lists, strict=True)], 0),
            "lists_per_poll": spread(lists, 0),
            "lists_in_the_half_interval_polls": spread(half_lists, 0),
            "follower_looks": router.paid.looks - before_looks,
            "look_wall_seconds": spread(lane.look_seconds, 4),
            "poll_wall_seconds": spread(poll_seconds, 4),
            "raw_list": raw,
            "cancel": {
                "deletes_at_once": deletes,
                "wall_seconds_for_all": round(cancel_seconds, 3),
                f"after_{polls}_more_polls": after,
            },
            "follower_failures": list(router.paid.failures),
        }
        journal.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,10,100,1000,1001", help="paid dispatches of the lane, per run")
    parser.add_argument("--polls", type=int, default=20, help="polls one interval apart, per run")
    args = parser.parse_args()
    runs = []
    for size in [int(s) for s in args.sizes.split(",") if s]:
        run = measure(size, args.polls)
        runs.append(run)
        print(json.dumps(run))
    path = write_result(
        "paid_follow",
        {
            "target": "one Batch API list call per poll interval for all paid jobs of a lane, whatever their number",
            "runs": runs,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
