"""Step to delivery on loopback: how long after a step is journaled its event reaches a webhook receiver.

100 dispatches submitted 50 ms apart on the fake port (each first submit journals a step and its ``queued``
event in one transaction), the driver's notifier running as the driver runs it (notify/service.py: ``Notifier``,
woken after each step as a tick wakes it), a signed JSON webhook to a ``http.server`` receiver on 127.0.0.1. The
time from the step's journaled time to the receiver reading the request: p50 / p95 / max.

    .venv/bin/python -m benchmarks.notify_delivery
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from benchmarks.common import percentiles, write_result
from fellows_fsm.config.file import Config
from fellows_fsm.config.notify import NotifyConfig, SinkConfig
from fellows_fsm.core.dispatch import Dispatch
from fellows_fsm.journal.store import Journal
from fellows_fsm.lanes.slurm.config import SlurmSettings
from fellows_fsm.notify.service import Notifier
from fellows_fsm.scheduler.fake import FakeScheduler
from fellows_fsm.scheduler.port import JobSpec
from fellows_fsm.testing import Driven


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between two steps")
    args = parser.parse_args()
    got: dict[str, float] = {}
    lock = threading.Lock()

    class Receive(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            at = time.time()
            with lock:
                got[json.loads(body)["event_id"]] = at
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["FSM_BENCH_SECRET"] = "bench-key"
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    sink = SinkConfig.from_table("bench", {"url": url, "secret_env": "FSM_BENCH_SECRET", "events": ["queued"]})
    with tempfile.TemporaryDirectory(prefix="fellows-notify-") as state_dir:
        config = Config(notify=NotifyConfig(sinks=(sink,)), state_dir=Path(state_dir))
        journal = Journal(config.journal_path)
        notifier = Notifier(config, journal).start()
        fake = FakeScheduler()
        ladder = SlurmSettings(park_cap_seconds=600).ladder
        for i in range(args.events):
            d = Driven(Dispatch(f"n{i:04d}", JobSpec(f"job{i}", "job.sbatch", gpus=8), ladder), fake, journal)
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=False, intent="prod", at=time.time())
            d.submit()  # the step and its event, committed together
            notifier.on_tick()
            time.sleep(args.gap)
        deadline = time.time() + 30
        while len(got) < args.events and time.time() < deadline:
            time.sleep(0.05)
        events = {e.event_id: e.at for i in range(args.events) for e in journal.events_of(f"n{i:04d}")}
        notifier.stop()
        journal.close()
    server.shutdown()
    lags = [got[event_id] - at for event_id, at in events.items() if event_id in got]
    result = {
        "events": args.events,
        "delivered": len(lags),
        "gap_seconds": args.gap,
        "step_to_delivery_seconds": percentiles(lags, digits=4),
    }
    print(f"{len(lags)} of {args.events} delivered; step -> delivery {result['step_to_delivery_seconds']}")
    print(f"wrote {write_result('notify_delivery', result)}")


if __name__ == "__main__":
    main()
