"""The commands and the config of notifications: a walk through the CLI tells a real receiver on loopback, bad
sinks are refused with one line (exit 3, nothing queued), URLs and secrets are never shown."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fellows_fsm.config.file import Config
from fellows_fsm.config.notify import redact_url
from fellows_fsm.errors import ConfigError
from tests.unit.cli_helpers import SchedulingFake, fill, refused, run, world
from tests.unit.notify.receiver import Receiver

SECRET = "cli-s3cret"


def _add(env: Path, text: str) -> None:
    config = env / "fellows.toml"
    config.write_text(config.read_text(encoding="utf-8") + "\n" + text, encoding="utf-8")


def _hook(url: str, extra: str = "") -> str:
    return f'[notify.hook]\nurl = "{url}"\nsecret_env = "FSM_HOOK_SECRET"\ntimeout_seconds = 2\n{extra}\n'


def _wait_for(predicate: object, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("not within the time")


def test_a_walk_tells_the_receiver_each_step_in_order_signed(
    env: Path, scheduling_fake: SchedulingFake, script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_HOOK_SECRET", SECRET)
    fill(scheduling_fake, "high-eur")  # high-eur is full: the dispatch moves to normal-eur and starts there
    with Receiver(secret=SECRET.encode()) as r:
        _add(env, _hook(r.url))
        result = run("submit", "--json", str(script))
        assert result.exit_code == 0, result.output
        dispatch_id = json.loads(result.stdout)["dispatch_id"]
        _wait_for(lambda: len(r.got) >= 3)
        # (the receiver reads a request before the sender records its answer)
        _wait_for(lambda: len(json.loads(run("notify", "log", "--json").stdout)) >= 3)
        log = run("notify", "log", "--json")
        metrics = run("metrics")
    assert [g.json["event"] for g in r.got] == ["queued", "rung_changed", "started"]
    assert all(g.signed for g in r.got)
    assert {g.json["dispatch"]["dispatch_id"] for g in r.got} == {dispatch_id}
    changed = r.got[1].json["details"]
    assert (changed["from"]["qos"], changed["to"]["qos"]) == ("high-eur", "normal-eur")
    started = r.got[2].json["details"]
    assert (started["lane"], started["qos"]) == ("fellows", "normal-eur")
    assert started["job_id"] == json.loads(result.stdout)["slurm_job_id"]
    assert [(d["event"], d["status"]) for d in json.loads(log.stdout)] == [
        ("queued", "delivered"),
        ("rung_changed", "delivered"),
        ("started", "delivered"),
    ]
    names = {f.name for f in text_string_to_metric_families(metrics.stdout)}
    assert {"fellows_dispatches", "fellows_rung_changes", "fellows_notify_undeliverable"} <= names
    journal_bytes = b"".join(p.read_bytes() for p in (env / "state").glob("journal.sqlite3*") if p.is_file())
    assert SECRET.encode() not in journal_bytes  # the secret is never journaled
    assert b"FSM_HOOK_SECRET" in journal_bytes  # (its name is: the driver reads it from its environment)


def test_notify_test_sends_one_signed_test_event_and_prints_the_answer_redacted(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_HOOK_SECRET", SECRET)
    with Receiver(secret=SECRET.encode()) as r:
        _add(env, _hook(r.url))
        ok = run("notify", "test", "hook")
        r.default = 404
        refused_ = run("notify", "test")
    assert ok.exit_code == 0, ok.output
    assert "delivered: HTTP 200" in ok.stdout
    assert [g.json["event"] for g in r.got] == ["test", "test"]
    assert r.got[0].signed
    assert refused_.exit_code == 1
    assert "refused: HTTP 404" in refused_.stdout
    for out in (ok.output, refused_.output):
        assert "secret-path" not in out
        assert "t0ps3cret" not in out
        assert SECRET not in out
    assert not (env / "state" / "journal.sqlite3").exists() or not json.loads(run("notify", "log", "--json").stdout)


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ('[notify.x]\nkind = "pager"\nurl = "https://h.example/a"', ("kind='pager'", "'webhook' or 'command'")),
        ('[notify.x]\nurl = "https://h.example/a"\nevents = ["endd"]', ("'endd'", "ended")),
        ('[notify.x]\nurl = "http://h.example/tok/abc"', ("http://h.example/…", "allow_plain_http = true")),
        ('[metrics]\nlisten = "nowhere:99999"', ("[metrics] listen", "127.0.0.1:9464")),
        ('[notify.x]\nurl = "https://h.example/a"\nsecret_env = "FSM_UNSET_SECRET"', ("FSM_UNSET_SECRET", "export")),
        ('[notify.x]\nkind = "command"\ncommand = ["sh", "-c", "{job_name}"]', ("{job_name}", "$FSM_JOB_NAME")),
    ],
)
def test_a_bad_sink_is_one_line_exit_3_and_nothing_queued(
    env: Path, scheduling_fake: SchedulingFake, script: Path, table: str, words: tuple[str, ...]
) -> None:
    _add(env, table)
    before = world(env, scheduling_fake)
    line = refused(run("submit", str(script)), 3, *words)
    assert "/tok/abc" not in line
    assert world(env, scheduling_fake) == before


def test_a_plain_http_url_to_loopback_or_allowed_is_taken_and_shown_redacted() -> None:
    config = Config.from_mapping(
        {
            "notify": {
                "local": {"url": "http://127.0.0.1:9/x?k=v"},
                "lan": {"url": "http://10.0.0.5/hook/abc", "allow_plain_http": True, "format": "slack"},
            }
        }
    )
    assert [s.shown for s in config.notify.sinks] == [
        "json webhook http://127.0.0.1:9/…",
        "slack webhook http://10.0.0.5/…",
    ]
    assert redact_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com/…"
    with pytest.raises(ConfigError, match="give_up_after_seconds"):
        Config.from_mapping({"notify": {"give_up_after_seconds": -1}})


def test_config_check_shows_the_sinks_redacted_and_no_secret(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSM_HOOK_SECRET", SECRET)
    _add(env, _hook("https://hooks.slack.com/services/T0/B0/XYZ", 'format = "slack"\nevents = ["ended", "attention"]'))
    _add(env, '[metrics]\nlisten = "127.0.0.1:9464"\ntextfile = "/tmp/f.prom"')
    result = run("config", "check")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "slack webhook https://hooks.slack.com/…" in out
    assert "ended, attention" in out
    assert "signed with $FSM_HOOK_SECRET" in out
    assert "http://127.0.0.1:9464/metrics" in out
    assert "XYZ" not in out
    assert SECRET not in out


def test_driver_status_says_which_sink_gave_up_on_events(env: Path, scheduling_fake: SchedulingFake) -> None:
    from fellows_fsm.journal.outbox import UNDELIVERABLE  # noqa: PLC0415
    from fellows_fsm.journal.store import Journal  # noqa: PLC0415

    (env / "state").mkdir(exist_ok=True)
    journal = Journal(env / "state" / "journal.sqlite3")
    journal.mark_sinks(["hook"])
    event_id = journal.put_event("", "budget_threshold", 1.0, {"reason": "x"})
    [event] = journal.events_of("")
    assert event.event_id == event_id
    journal.put_delivery(event.seq, "hook", status=UNDELIVERABLE, at=2.0, next_at=None, answer="HTTP 503")
    journal.close()
    result = run("driver", "status")
    assert result.exit_code == 0, result.output
    assert "1 event(s) undeliverable at sink 'hook'" in result.stdout
    assert json.loads(run("driver", "status", "--json").stdout)["undeliverable"] == {"hook": 1}
