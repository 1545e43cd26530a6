"""Notifications on the real local SLURM, from the real background driver to real receivers on loopback: a walk
told to a receiver that hangs and to one down for 20 s (the walk's rung changes as without them, nothing lost, each
dispatch's order kept), and a driver SIGKILLed after journaling its events and before sending them (sent after the
restart, with the same event ids)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.notify.receiver import Receiver, free_port

from .cli_harness import cli, driver_pid, final_row, ledger_config, read_journal, stop_background_driver, submit_args
from .conftest import Cluster

pytestmark = pytest.mark.slurm

CAP = 4.0
POLL = 1.0
SECRET = "real-s3cret"


@pytest.fixture(autouse=True)
def _stop_drivers(tmp_path: Path) -> Iterator[None]:
    yield
    stop_background_driver(tmp_path, (signal.SIGTERM,))


def _config(tmp_path: Path, sinks: str) -> Path:
    path = ledger_config(tmp_path, cap=CAP, poll=POLL, router="driver_idle_seconds = 5\n")
    path.write_text(path.read_text(encoding="utf-8") + "\n[notify]\ngive_up_after_seconds = 300\n" + sinks)
    return path


def _sink(name: str, url: str, timeout: float = 5) -> str:
    return f'\n[notify.{name}]\nurl = "{url}"\nsecret_env = "FSM_REAL_SECRET"\ntimeout_seconds = {timeout}\n'


def _env() -> dict[str, str]:
    return {**os.environ, "FSM_REAL_SECRET": SECRET}


def _wait(what: str, predicate: object, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {timeout:g} s")


def test_a_hanging_and_a_down_receiver_change_nothing_of_the_walk_and_lose_nothing(
    slurm: Cluster, tmp_path: Path
) -> None:
    slurm.occupy("high-eur", 8, count=2)  # high-eur is full: the job parks at its cap and runs on normal-eur
    port = free_port()
    with Receiver(secret=SECRET.encode()) as hanging:
        hanging.hang_seconds = 60.0
        config = _config(tmp_path, _sink("hang", hanging.url, timeout=3) + _sink("late", f"http://127.0.0.1:{port}/x"))
        submitted = time.monotonic()
        result = cli(config, *submit_args(slurm, "--detach"), env=_env())
        assert result.returncode == 0, result.stderr
        dispatch_id = result.stdout.strip()
        row = final_row(slurm, tmp_path, dispatch_id, timeout=CAP + 30)
        assert (row.label, row.qos) == ("RUNNING", "normal-eur")
        with read_journal(tmp_path) as j:
            steps = j.steps(dispatch_id)
            events = j.events_of(dispatch_id)
        assert [(s.trigger, s.qos) for s in steps] == [
            ("submit", "high-eur"),
            ("park", "high-eur"),
            ("cancel", "high-eur"),
            ("resubmit", "normal-eur"),
            ("start", "normal-eur"),
        ]
        # The walk as without the sinks: the park came at the window's end, within two polls (a sink never
        # holds a poll: a hanging one costs its own thread 3 s an attempt).
        assert CAP <= steps[1].at - steps[0].at <= CAP + 2 * POLL + 1
        assert [e.event for e in events] == ["queued", "rung_changed", "started"]
        down_for = 20 - (time.monotonic() - submitted)
        if down_for > 0:
            time.sleep(down_for)  # the late receiver is down 20 s from the submit
        with Receiver(secret=SECRET.encode(), port=port) as late:
            _wait("delivery to the late receiver", lambda: len(late.got) >= 3, 90)
            time.sleep(1)  # nothing more comes
        assert [g.headers["X-Fellows-Event-Id"] for g in late.got] == [e.event_id for e in events]  # order kept
        assert all(g.signed for g in late.got)
        assert hanging.got  # the hanging receiver was asked (and never answered in time)
        log = cli(config, "notify", "log", "--json", env=_env())
        assert log.returncode == 0, log.stderr
        assert "hang" in log.stdout
        assert "no answer within 3 s" in log.stdout


def test_a_driver_killed_before_sending_sends_after_its_restart_with_the_same_ids(
    slurm: Cluster, tmp_path: Path
) -> None:
    port = free_port()  # nobody listens yet: every attempt is refused, the events stay in the outbox
    config = _config(tmp_path, _sink("hook", f"http://127.0.0.1:{port}/in"))
    result = cli(config, *submit_args(slurm, "--detach"), env=_env())
    assert result.returncode == 0, result.stderr
    dispatch_id = result.stdout.strip()
    row = final_row(slurm, tmp_path, dispatch_id, timeout=30)
    assert (row.label, row.qos) == ("RUNNING", "high-eur")
    with read_journal(tmp_path) as j:
        events = j.events_of(dispatch_id)
    assert [e.event for e in events] == ["queued", "started"]
    os.kill(driver_pid(tmp_path), signal.SIGKILL)  # journaled, not sent: the driver dies
    time.sleep(0.5)
    with Receiver(secret=SECRET.encode(), port=port) as r:
        status = cli(config, "status", env=_env())  # any command starts a driver for the events left
        assert status.returncode == 0, status.stderr
        assert "started the background driver" in status.stderr
        _wait("the events after the restart", lambda: len(r.got) >= 2, 60)
        time.sleep(1)
    assert [g.headers["X-Fellows-Event-Id"] for g in r.got] == [e.event_id for e in events]
    assert all(g.signed for g in r.got)
