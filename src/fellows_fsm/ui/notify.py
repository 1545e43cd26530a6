"""``fellows-fsm notify test [NAME]``, ``fellows-fsm notify log`` and ``fellows-fsm metrics``: try a sink now, see
what became of the events, print the Prometheus metrics. The sending is notify/'s; here are only the commands."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import click
from rich.table import Table

from fellows_fsm.clock import iso_utc
from fellows_fsm.config.file import Config
from fellows_fsm.config.notify import EVENTS, SinkConfig
from fellows_fsm.driver.budget import journaled_budget
from fellows_fsm.errors import FellowsError, UsageError
from fellows_fsm.notify.envelope import VERSION
from fellows_fsm.notify.metrics import text
from fellows_fsm.notify.sinks import SinkClient
from fellows_fsm.ui.app import config_of, config_option, echo_json, main, make_console, open_journal

__all__ = ["metrics", "notify", "notify_facts"]


@main.group(short_help="Notifications: send a test event to a sink, see recent deliveries.")
def notify() -> None:
    """The [notify.<name>] sinks the driver tells of each step (webhook, Slack, command), from the journal's
    outbox: at least once, in order per dispatch, retried for [notify] give_up_after_seconds."""


def _test_body() -> tuple[str, str]:
    event_id = uuid.uuid4().hex
    envelope: dict[str, Any] = {
        "version": VERSION,
        "event_id": event_id,
        "event": "test",
        "at": iso_utc(time.time()),
        "dispatch": None,
        "reason": "a test event from `fellows-fsm notify test`",
        "details": {},
    }
    return event_id, json.dumps(envelope, separators=(",", ":"), sort_keys=True)


def _sinks(config: Config, name: str | None) -> tuple[SinkConfig, ...]:
    sinks = config.notify.sinks
    if not sinks:
        raise UsageError(
            f"{config.source} has no [notify.<name>] sink; add one, e.g. [notify.team] url = 'https://...'"
        )
    if name is None:
        return sinks
    found = config.notify.sink(name)
    if found is None:
        raise UsageError(f"no sink {name!r} in {config.source}; its sinks are {', '.join(s.name for s in sinks)}")
    return (found,)


@notify.command("test", short_help="Send one test event to each sink (or NAME) and print the answer.")
@click.argument("name", required=False)
@config_option
@click.pass_context
def test(ctx: click.Context, name: str | None) -> None:
    """Send one test event (``event: test``, no dispatch, never journaled) to each sink, or the sink NAME, now,
    and print each answer. Exit 1 if any sink did not take it."""
    config = config_of(ctx)
    failed = False
    for sink in _sinks(config, name):
        event_id, body = _test_body()
        client = SinkClient(sink, hidden=frozenset(s.secret_env for s in config.notify.sinks if s.secret_env))
        try:
            answer = client.send("test", event_id, "", body)
        finally:
            client.close()
        words = "delivered" if answer.ok else ("failed, would be retried" if answer.retry else "refused")
        click.echo(f"{sink.name} ({sink.shown}): {words}: {answer.said} (event {event_id})")
        failed = failed or not answer.ok
    if failed:
        ctx.exit(1)


@notify.command("log", short_help="Recent deliveries: which event went to which sink, and what came back.")
@click.option("-n", "limit", type=click.IntRange(min=1), default=30, show_default=True, help="How many.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list.")
@config_option
@click.pass_context
def log(ctx: click.Context, limit: int, as_json: bool) -> None:
    """The latest deliveries, oldest first: when, the sink, the event and its dispatch, its status (delivered,
    pending: retried at next_at, failed: refused for good, undeliverable: given up on), attempts and the answer."""
    config = config_of(ctx)
    if not config.journal_path.exists():
        rows = []
    else:
        with open_journal(config, readonly=True) as journal:
            rows = journal.recent_deliveries(limit)
    if as_json:
        echo_json(
            [
                {
                    "at": iso_utc(d.last_at) if d.last_at else None,
                    "sink": d.sink,
                    "event": d.event,
                    "event_id": d.event_id,
                    "dispatch_id": d.dispatch_id or None,
                    "status": d.status,
                    "attempts": d.attempts,
                    "next_at": iso_utc(d.next_at) if d.next_at else None,
                    "answer": d.answer,
                }
                for d in rows
            ]
        )
        return
    if not rows:
        click.echo("no deliveries yet")
        return
    table = Table(box=None)
    for column in ("at", "sink", "event", "dispatch", "status", "attempts", "answer"):
        table.add_column(column)
    for d in rows:
        at = iso_utc(d.last_at) if d.last_at else "-"
        table.add_row(at, d.sink, d.event, d.dispatch_id or "-", d.status, str(d.attempts), d.answer)
    make_console().print(table)


@main.command(short_help="The Prometheus metrics, in its text format.")
@config_option
@click.pass_context
def metrics(ctx: click.Context) -> None:
    """Print the metrics (Prometheus text format) read from the journal: dispatches by state and lane, rung
    changes, paid GPU-hours and cost, what the [budget] has left, the driver's SLURM calls, the notifications."""
    config = config_of(ctx)
    if not config.journal_path.exists():
        raise FellowsError(f"no journal at {config.journal_path} yet; submit a job first")
    with open_journal(config, readonly=True) as journal:
        click.echo(text(journal, journaled_budget(journal) or config.budget), nl=False)


def notify_facts(config: Config) -> list[tuple[str, str]]:
    """What ``config check`` says of the sinks and metrics: each sink's kind, where (a URL redacted), its events,
    how it is signed (the secret's variable or file, never its value)."""
    facts: list[tuple[str, str]] = []
    for sink in config.notify.sinks:
        signed = (
            f"signed with ${sink.secret_env}"
            if sink.secret_env
            else (f"signed with the key in {sink.secret_file}" if sink.secret_file else "not signed")
        )
        if sink.runs_command:
            signed = "the event JSON on stdin, its values in FSM_* variables"
        events = "every event" if len(sink.events) == len(EVENTS) else ", ".join(sink.events)
        facts.append((f"notify {sink.name}", f"{sink.shown}; {events}; {signed}; timeout {sink.timeout_seconds:g} s"))
    if config.notify.sinks:
        facts.append(("notify retries", f"for {config.notify.give_up_after_seconds:g} s, then undeliverable"))
    m = config.metrics
    if m.textfile is not None:
        facts.append(("metrics textfile", f"{m.textfile} (rewritten each poll)"))
    if m.listen is not None:
        facts.append(("metrics endpoint", f"http://{m.listen[0]}:{m.listen[1]}/metrics (served by the driver)"))
    return facts
