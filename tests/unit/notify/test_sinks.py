"""The sinks' other shapes and the driver's notifier: a Slack message, a command sink (argv, FSM_* values, the event
on stdin, bounded), redirects, budget thresholds told once, the textfile and /metrics endpoint."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from freezegun import freeze_time
from prometheus_client.parser import text_string_to_metric_families

from fellows_fsm import Dispatch, FakeScheduler, JobSpec, SlurmSettings
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.file import Config
from fellows_fsm.config.notify import MetricsConfig, NotifyConfig, SinkConfig
from fellows_fsm.core.effects import Record, Step
from fellows_fsm.core.paid import PaidMark
from fellows_fsm.core.vocab import PaidStatus, State, Trigger
from fellows_fsm.errors import ConfigError
from fellows_fsm.journal.outbox import DELIVERED, FAILED
from fellows_fsm.journal.store import Journal
from fellows_fsm.notify.sender import SinkSender
from fellows_fsm.notify.service import Notifier
from fellows_fsm.notify.sinks import SinkClient
from fellows_fsm.testing import Driven
from tests.unit.journal.journals import SPEC
from tests.unit.notify.receiver import Receiver, free_port
from tests.unit.notify.test_outbox import _walk

SECRET = b"k3y"


def _body(event: str = "ended") -> str:
    envelope = {
        "version": 1,
        "event_id": "e1",
        "event": event,
        "at": "2026-12-07T00:00:00+00:00",
        "dispatch": {"dispatch_id": "d1", "name": "train", "state": "PAID_DONE"},
        "reason": "it ran",
        "details": {"result": "PAID_DONE", "outcome": "paid-succeeded"},
    }
    return json.dumps(envelope)


def test_a_slack_sink_posts_the_facts_in_words_signed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSM_SLACK_KEY", SECRET.decode())
    with Receiver(secret=SECRET) as r:
        sink = SinkConfig.from_table("s", {"url": r.url, "format": "slack", "secret_env": "FSM_SLACK_KEY"})
        answer = SinkClient(sink).send("ended", "e1", "d1", _body())
    assert answer.ok
    [got] = r.got
    assert got.signed
    assert got.headers["X-Fellows-Event"] == "ended"
    assert set(got.json) == {"text"}
    assert "dispatch d1 (train) ended PAID_DONE (paid-succeeded): it ran" in got.json["text"]


def test_a_command_sink_gets_its_values_in_fsm_variables_and_the_event_on_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_SLACK_KEY", "another sink's secret")  # (an FSM_ name, so the dump below would show it)
    out = tmp_path / "got.json"
    code = (  # a literal brace doubled, as in every template
        "import json, os, sys; json.dump({{'argv': sys.argv[2:], 'stdin': sys.stdin.read(),"
        " 'env': {{k: v for k, v in os.environ.items() if k.startswith('FSM_')}}}}, open(sys.argv[1], 'w'))"
    )
    with pytest.raises(ConfigError, match="literal brace"):
        SinkConfig.from_table("c", {"kind": "command", "command": ["python", "-c", "print('{')"]})
    sink = SinkConfig.from_table(
        "c", {"kind": "command", "command": [sys.executable, "-c", code, str(out), "{event}", "{dispatch_id}"]}
    )
    answer = SinkClient(sink, hidden=frozenset({"FSM_SLACK_KEY"})).send("ended", "e1", "d1", _body())
    assert (answer.ok, answer.said) == (True, "exit 0")
    got = json.loads(out.read_text())
    assert got["argv"] == ["ended", "d1"]
    assert json.loads(got["stdin"])["event_id"] == "e1"
    assert got["env"]["FSM_EVENT"] == "ended"
    assert got["env"]["FSM_JOB_NAME"] == "train"  # a value the user controls: only in the environment
    assert got["env"]["FSM_REASON"] == "it ran"
    assert "FSM_SLACK_KEY" not in got["env"]  # no sink's secret reaches a command


def test_a_command_sink_that_hangs_is_killed_at_its_timeout_and_retried() -> None:
    sink = SinkConfig.from_table("c", {"kind": "command", "command": ["sleep", "30"], "timeout_seconds": 0.5})
    started = time.monotonic()
    answer = SinkClient(sink).send("ended", "e1", "d1", _body())
    assert time.monotonic() - started < 5
    assert (answer.ok, answer.retry) == (False, True)
    assert "did not end within 0.5 s" in answer.said
    missing = SinkConfig.from_table("m", {"kind": "command", "command": ["/nonexistent/notify-me"]})
    assert SinkClient(missing).send("ended", "e1", "d1", _body()).retry is False  # cannot run: not retried


def test_a_redirect_is_followed_on_the_same_host_only() -> None:
    with Receiver() as there, Receiver() as here:
        here.answers = [307]
        here.location = "/moved"
        sink = SinkConfig.from_table("r", {"url": here.url})
        same = SinkClient(sink).send("ended", "e1", "d1", _body())
        here.answers = [307]
        here.location = there.url
        other = SinkClient(sink).send("ended", "e1", "d1", _body())
    assert same.ok
    assert [g.path for g in here.got][:2] == ["/hooks/secret-path?token=t0ps3cret", "/moved"]
    assert (other.ok, other.retry) == (False, False)
    assert "another host" in other.said
    assert "secret-path" not in other.said
    assert there.got == []


def _paid(journal: Journal, dispatch_id: str, gpus: int, hours: float) -> None:
    """A dispatch pinned to a priced lane whose paid run began (its worst case counts against the budget)."""
    journal.add_lane_dispatch(
        dispatch_id, JobSpec("j", "j.sbatch", gpus=gpus), intent="prod", lane="gcp", at=time.time()
    )
    step = Step(
        at=time.time(),
        source="HANDING_OFF",
        dest="HANDING_OFF",
        trigger=Trigger.HAND_OFF,
        rung_index=0,
        qos="",
        job_id=None,
    )
    mark = PaidMark(PaidStatus.STARTING, "gcp", gpus, hours * 3600, 2.0)
    journal.write([Record(dispatch_id, step, State.HANDING_OFF, final=False, paid=mark)])


def test_a_budget_window_passing_80_and_100_percent_is_told_once_each(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    budget = BudgetConfig(paid_gpu_hours_per_day=10)
    notifier = Notifier(Config(state_dir=tmp_path), journal, budget=lambda: budget)
    _paid(journal, "p1", 1, 7)  # 7 of 10
    assert notifier.thresholds(budget, time.time()) == []
    _paid(journal, "p2", 1, 1.5)  # 8.5: past 80 %
    assert len(notifier.thresholds(budget, time.time())) == 1
    assert notifier.thresholds(budget, time.time()) == []  # told once
    _paid(journal, "p3", 1, 2)  # 10.5: past 100 %
    [event_id] = notifier.thresholds(budget, time.time())
    [told] = [e for e in journal.events_of("") if e.event_id == event_id]
    assert (told.facts["window"], told.facts["percent"]) == ("day_gpu_hours", 100)
    journal.close()


def test_the_textfile_and_the_endpoint_serve_the_same_metrics(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    _walk(journal)
    port = free_port()
    textfile = tmp_path / "fellows.prom"
    config = Config(state_dir=tmp_path, metrics=MetricsConfig(textfile=textfile, listen=("127.0.0.1", port)))
    notifier = Notifier(config, journal, calls=lambda: {"fellows": {"squeue": 3}}).start()
    try:
        notifier.watch_once()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            served = response.read().decode()
    finally:
        notifier.stop()
        journal.close()
    for text in (textfile.read_text(), served):
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["fellows_slurm_calls"].samples[0].value == 3.0
        assert families["fellows_dispatches"].samples[0].labels["lane"] == "fellows"
    assert not list(tmp_path.glob("fellows.prom.*"))  # the temporary file was renamed over it


def test_the_sender_thread_delivers_what_a_tick_journaled(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    with Receiver() as r:
        r.default = 200
        sinks = (
            SinkConfig.from_table("ok", {"url": r.url, "events": ["queued"]}),
            SinkConfig.from_table("no", {"url": r.url.replace("/hooks", "/gone"), "events": ["rung_changed"]}),
        )
        r.answers = []
        notifier = Notifier(Config(state_dir=tmp_path, notify=NotifyConfig(sinks=sinks)), journal).start()
        try:
            _walk(journal)
            notifier.on_tick()
            deadline = time.monotonic() + 10
            while notifier.busy() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            notifier.stop()
    queued, changed = journal.events_of("w1")
    assert journal.delivery(queued.seq, "ok").status == DELIVERED  # type: ignore[union-attr]
    assert journal.delivery(changed.seq, "no").status == DELIVERED  # type: ignore[union-attr]
    assert journal.delivery(queued.seq, "no") is None  # not asked for
    assert FAILED not in {d.status for d in journal.recent_deliveries()}
    assert isinstance(SinkSender, type)
    journal.close()


def test_the_paid_totals_of_the_metrics_are_the_paid_runs_own_arithmetic(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    _paid(journal, "r1", 2, 4)  # handed off, never seen running: nothing ran yet
    _paid(journal, "r2", 4, 4)
    journal.set_paid("r2", 1000.0, PaidMark(PaidStatus.RUNNING))
    journal.set_paid("r2", 1000.0 + 5400, PaidMark(PaidStatus.SUCCEEDED))  # 1.5 h on 4 GPUs
    _paid(journal, "r3", 1, 4)
    journal.set_paid("r3", 2000.0, PaidMark(PaidStatus.RUNNING))  # still running
    now = 2000.0 + 1800
    expected: dict[str, list[float]] = {}
    for run in journal.paid_runs():
        acc = expected.setdefault(run.lane, [0.0, 0.0])
        acc[0] += run.gpu_hours(now)
        acc[1] += run.cost(now) or 0.0
    totals = journal.paid_totals(now)
    assert totals.keys() == expected.keys()
    assert totals["gcp"] == pytest.approx(tuple(expected["gcp"]))
    assert totals["gcp"][0] == pytest.approx(6.0 + 0.5)
    journal.close()


def test_a_cluster_silent_longer_than_a_waiting_rungs_cap_is_told_once_as_attention(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        ds = [
            Driven(Dispatch(f"u{i}", SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal) for i in range(2)
        ]
        for d in ds:
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
            d.submit()
        frozen.tick(5)
        for d in ds:
            d.pause()  # the cluster did not answer: each dispatch's clock stops
        paused_at = time.time()
    notifier = Notifier(Config(state_dir=tmp_path), journal)
    assert notifier.outages(paused_at + 30) == []  # within the cap: nothing said
    [event_id] = notifier.outages(paused_at + 61)
    assert notifier.outages(paused_at + 120) == []  # one outage, told once (not once per dispatch)
    [told] = [e for e in journal.events_of("") if e.event_id == event_id]
    assert (told.event, told.facts["result"], told.facts["lane"]) == ("attention", "UNREACHABLE", "fellows")
    assert told.facts["dispatches"] == ["u0", "u1"]
    journal.close()
