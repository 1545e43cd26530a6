"""Delivery to a real HTTP receiver on loopback: signed, at least once, in order per dispatch, retried only when a
retry may help, and resumed from the outbox by a new sender (a restarted driver)."""

from __future__ import annotations

from pathlib import Path

import pytest
from freezegun import freeze_time
from prometheus_client.parser import text_string_to_metric_families

from fellows_fsm import Dispatch, FakeScheduler, SlurmSettings
from fellows_fsm.config.budget import BudgetConfig
from fellows_fsm.config.notify import SinkConfig
from fellows_fsm.journal.outbox import DELIVERED, FAILED, PENDING, UNDELIVERABLE
from fellows_fsm.journal.store import Journal
from fellows_fsm.notify.metrics import remember_calls, text
from fellows_fsm.notify.sender import SinkSender
from fellows_fsm.testing import Driven
from tests.unit.journal.journals import SPEC
from tests.unit.notify.receiver import Receiver, free_port

SECRET = b"s3cret-key"


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _walks(journal: Journal, *ids: str) -> None:
    """Each dispatch submitted and moved one rung (events: queued, rung_changed), the dispatches interleaved."""
    fake = FakeScheduler()
    with freeze_time("2026-11-30 12:00:00") as frozen:
        ds = [Driven(Dispatch(i, SPEC, SlurmSettings(park_cap_seconds=60).ladder), fake, journal) for i in ids]
        for d in ds:
            journal.add_dispatch(d.id, d.spec, d.ladder, pinned=d.pinned, intent="prod", at=0.0)
            d.submit()
        frozen.tick(60)
        for d in ds:
            assert d.job_id is not None
            d.advance(fake.observe([d.job_id])[d.job_id])


def _sender(journal: Journal, url: str, clock: Clock, *, give_up: float = 86_400.0, timeout: float = 2.0) -> SinkSender:
    sink = SinkConfig.from_table("hook", {"url": url, "secret_env": "FSM_TEST_SECRET", "timeout_seconds": timeout})
    journal.mark_sinks(["hook"])
    return SinkSender(sink, journal, give_up_after_seconds=give_up, now=clock)


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSM_TEST_SECRET", SECRET.decode())


def test_a_500_then_a_200_delivers_once_with_the_same_id_and_signature(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    clock = Clock()
    with Receiver(secret=SECRET) as r:
        sender = _sender(journal, r.url, clock)
        _walks(journal, "a1")
        r.answers = [500]
        sender.run_once()  # queued: 500 (retried later), rung_changed waits behind it
        assert len(r.got) == 1
        assert sender.run_once() == 0  # not yet due: nothing sent
        clock.t += 1.5
        sender.run_once()  # queued again (200), then rung_changed (200)
        sender.run_once()
    ids = [g.headers["X-Fellows-Event-Id"] for g in r.got]
    assert ids[0] == ids[1]  # the retry is the same event
    assert [g.json["event"] for g in r.got] == ["queued", "queued", "rung_changed"]
    assert all(g.signed for g in r.got)  # HMAC-SHA256 of the exact body
    assert r.got[0].body == r.got[1].body  # the same bytes on every attempt
    first = r.got[0]
    assert first.headers["Content-Type"] == "application/json"
    assert first.headers["X-Fellows-Event"] == "queued"
    envelope = first.json
    assert envelope["version"] == 1
    assert envelope["dispatch"]["dispatch_id"] == "a1"
    assert envelope["at"].endswith("+00:00")
    queued = journal.delivery(journal.events_of("a1")[0].seq, "hook")
    assert queued is not None
    assert (queued.status, queued.attempts) == (DELIVERED, 2)
    assert sender.run_once() == 0  # nothing more: delivered once
    journal.close()


def test_a_receiver_down_for_20_s_loses_nothing_and_keeps_each_dispatchs_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    clock = Clock()
    port = free_port()
    url = f"http://127.0.0.1:{port}/in"
    sender = _sender(journal, url, clock)
    _walks(journal, "b1", "b2", "b3")
    down_until = clock.t + 20
    while clock.t < down_until:  # nobody listens: connection refused, backed off
        sender.run_once()
        clock.t += 0.5
    tried = [journal.delivery(e.seq, "hook") for d in ("b1", "b2", "b3") for e in journal.events_of(d)]
    assert [t.status if t else None for t in tried] == [PENDING, None] * 3  # each dispatch's first event waits
    with Receiver(secret=SECRET, port=port) as r:
        for _ in range(10):
            clock.t += 60
            sender.run_once()
    for d in ("b1", "b2", "b3"):
        assert [e["event"] for e in r.events(lambda g, d=d: g.json["dispatch"]["dispatch_id"] == d)] == [
            "queued",
            "rung_changed",
        ]
    assert len(r.got) == 6
    assert all(g.signed for g in r.got)
    journal.close()


def test_a_404_is_recorded_and_never_retried(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    clock = Clock()
    with Receiver(secret=SECRET) as r:
        r.default = 404
        sender = _sender(journal, r.url, clock)
        _walks(journal, "c1")
        sender.run_once()
        clock.t += 3600
        sender.run_once()
    assert len(r.got) == 2  # each event once: queued, then rung_changed (a refusal blocks nothing behind it)
    statuses = [journal.delivery(e.seq, "hook") for e in journal.events_of("c1")]
    assert [(s.status, s.attempts, s.answer) for s in statuses if s] == [(FAILED, 1, "HTTP 404")] * 2
    journal.close()


def test_a_hanging_receiver_costs_one_timeout_per_attempt_and_gives_up_after_the_configured_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    clock = Clock()
    with Receiver(secret=SECRET) as r:
        r.hang_seconds = 3.0
        sender = _sender(journal, r.url, clock, give_up=10.0, timeout=0.5)
        _walks(journal, "h1")
        sender.run_once()
        first = journal.delivery(journal.events_of("h1")[0].seq, "hook")
        assert first is not None
        assert (first.status, first.answer) == (PENDING, "no answer within 0.5 s")
        clock.t += 11
        sender.run_once()  # past give_up_after_seconds: undeliverable, and the next event goes
        r.hang_seconds = 0.0
        clock.t += 1
        sender.run_once()
    last = [journal.delivery(e.seq, "hook") for e in journal.events_of("h1")]
    assert [d.status if d else None for d in last] == [UNDELIVERABLE, DELIVERED]
    [said] = [r for r in caplog.records if "undeliverable" in r.getMessage()]  # the driver's log says so
    assert said.levelname == "ERROR"
    assert "secret-path" not in said.getMessage()
    journal.close()


def test_a_new_sender_resumes_from_the_outbox_with_the_same_event_id(tmp_path: Path) -> None:
    """The driver died after journaling the events (never sent) and after one failed attempt (body fixed): a new
    process's sender sends both, with the ids and bytes the outbox holds."""
    path = tmp_path / "j.sqlite3"
    journal = Journal(path)
    clock = Clock()
    port = free_port()
    sender = _sender(journal, f"http://127.0.0.1:{port}/in", clock)
    _walks(journal, "k1")
    sender.run_once()  # queued: tried, refused connection; rung_changed: journaled, never tried
    journal.close()
    journal = Journal(path)  # the restarted driver
    kept = journal.events_of("k1")
    assert [e.body is not None for e in kept] == [True, False]  # the first was tried: its bytes are fixed
    with Receiver(secret=SECRET, port=port) as r:
        again = _sender(journal, r.url, clock)
        clock.t += 5
        again.run_once()
    assert [g.headers["X-Fellows-Event-Id"] for g in r.got] == [e.event_id for e in kept]
    assert r.got[0].body.decode() == kept[0].body
    journal.close()


def test_the_metrics_parse_with_prometheus_clients_own_parser(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    journal.mark_sinks(["hook"])
    _walks(journal, "m1", "m2")
    journal.put_delivery(journal.events_of("m1")[0].seq, "hook", status=UNDELIVERABLE, at=1.0, next_at=None, answer="x")
    remember_calls(journal, {"fellows": {"squeue": 7, "sbatch": 4}})
    parsed = {
        f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
        for f in text_string_to_metric_families(text(journal, BudgetConfig(paid_gpu_hours_per_day=10)))
    }
    assert parsed["fellows_dispatches"] == {(("lane", "fellows"), ("state", "RESUBMITTED(normal-eur)")): 2.0}
    changes = parsed["fellows_rung_changes"]
    assert changes[(("from_qos", "high-eur"), ("lane", "fellows"), ("to_qos", "normal-eur"))] == 2.0
    assert parsed["fellows_slurm_calls"][(("cluster", "fellows"), ("command", "squeue"))] == 7.0
    assert parsed["fellows_notify_undeliverable"] == {(("sink", "hook"),): 1.0}
    assert parsed["fellows_budget_remaining"] == {(("window", "day_gpu_hours"),): 10.0}
    journal.close()


def test_the_sender_reads_past_what_is_final_and_still_sends_what_comes_later(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite3")
    clock = Clock()
    with Receiver(secret=SECRET) as r:
        sender = _sender(journal, r.url, clock)
        _walks(journal, "w1")
        sender.run_once()
        assert sender.after == 0  # (the events were read from the start: nothing was final before)
        sender.run_once()
        assert sender.after == journal.last_event()  # both delivered: the next reads start past them
        assert not sender.pending()
        _walks(journal, "w2")
        assert sender.pending()
        sender.run_once()
    assert [g.json["dispatch"]["dispatch_id"] for g in r.got] == ["w1", "w1", "w2", "w2"]
    journal.close()
