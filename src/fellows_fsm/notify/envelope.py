"""An event as it is sent: the JSON envelope (version 1), Slack's words for it, the headers, the signature.

The body is made once per event (``body``, kept in the outbox by the sender: every retry, every sink and every
driver after a restart sends the same bytes, so a signature checks and ``event_id`` dedupes). Values only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from fellows_fsm.clock import iso_utc
from fellows_fsm.journal.outbox import OutboxEvent
from fellows_fsm.journal.snapshot import dispatch_json, paid_facts
from fellows_fsm.journal.store import Journal

__all__ = ["VERSION", "envelope", "headers", "signature", "slack_text"]

VERSION = 1
_TOP = ("reason", "cost")


def envelope(journal: Journal, event: OutboxEvent) -> dict[str, Any]:
    """The envelope of ``event``: ``version``, ``event_id``, ``event``, ``at`` (RFC 3339, UTC), ``dispatch`` (the
    object ``status --json`` gives for it, as the journal has it now, its job's end with it; null for an event of
    no dispatch), ``reason`` (the sentence its step's history shows), ``cost`` (where money is involved, else
    absent) and ``details`` (what the event says beyond: a rung change's ``from``, ``to`` and ``why``; a start's
    ``lane``, ``qos`` and ``job_id``; an end's ``result``, ``outcome`` and ``exit_code``; ...)."""
    row = journal.dispatch(event.dispatch_id) if event.dispatch_id else None
    dispatch = None
    if row is not None:
        handoff = journal.handoff(row.id)
        paid, budget = paid_facts(journal, row, handoff)
        end = journal.ends([row.id]).get(row.id)
        dispatch = dispatch_json(row, handoff, paid=paid, budget=budget, now=event.at, end=end)
    facts = dict(event.facts)
    out: dict[str, Any] = {
        "version": VERSION,
        "event_id": event.event_id,
        "event": event.event,
        "at": iso_utc(event.at),
        "dispatch": dispatch,
        "reason": facts.pop("reason", ""),
    }
    if facts.get("cost") is not None:
        out["cost"] = facts.pop("cost")
    facts.pop("cost", None)
    out["details"] = facts
    return out


def body(journal: Journal, event: OutboxEvent) -> str:
    """The exact JSON text sent for ``event`` (compact, keys in a fixed order)."""
    return json.dumps(envelope(journal, event), separators=(",", ":"), sort_keys=True)


def slack_text(envelope: dict[str, Any]) -> str:
    """The same facts in words, for a Slack incoming webhook (``{"text": ...}``)."""
    d = envelope.get("dispatch") or {}
    details = envelope.get("details") or {}
    who = f"dispatch {d.get('dispatch_id')} ({d.get('name')})" if d else "fellows-fsm"
    said = " ".join(_said(str(envelope.get("event")), d, details, envelope.get("cost") or {}).split())
    cost = envelope.get("cost")
    money = ""
    if cost:
        worst = cost.get("worst_case_cost")
        money = f"; worst case {cost.get('worst_case_gpu_hours')} GPU-hours" + (
            f", cost {worst}" if worst is not None else ""
        )
    reason = f": {envelope['reason']}" if envelope.get("reason") else ""
    return f"{who} {said}{money}{reason} [{envelope.get('at')}, event {envelope.get('event_id')}]"


def signature(secret: bytes, payload: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of the exact body>`` (the scheme GitHub's webhooks use)."""
    return "sha256=" + hmac.new(secret, payload, hashlib.sha256).hexdigest()


def headers(event: str, event_id: str, payload: bytes, secret: bytes | None) -> dict[str, str]:
    """A webhook request's headers: Content-Type, X-Fellows-Event, X-Fellows-Event-Id, and with a secret
    X-Fellows-Signature."""
    out = {
        "Content-Type": "application/json",
        "User-Agent": "fellows-fsm",
        "X-Fellows-Event": event,
        "X-Fellows-Event-Id": event_id,
    }
    if secret is not None:
        out["X-Fellows-Signature"] = signature(secret, payload)
    return out


def _said(event: str, d: dict[str, Any], details: dict[str, Any], cost: dict[str, Any]) -> str:
    if event == "queued":
        return f"queued on {details.get('qos') or details.get('lane') or d.get('lane')}"
    if event == "rung_changed":
        before, after = details.get("from") or {}, details.get("to") or {}
        return f"moved from {before.get('qos')} to {after.get('qos')} ({details.get('why')})"
    if event == "started":
        return f"started on {details.get('lane')} {details.get('qos') or ''} job {details.get('job_id') or ''}"
    if event == "handed_off":
        return f"handed off to the paid lane {details.get('lane') or cost.get('lane')}"
    if event == "budget_wait":
        return "waits for the budget on its last free rung"
    if event == "budget_threshold":
        return f"the budget's {details.get('window')} passed {details.get('percent')} %"
    if event == "ended":
        return f"ended {details.get('result')} ({details.get('outcome')})"
    if event == "attention":
        return f"needs attention: {details.get('result')}"
    if event == "test":
        return "test event from `fellows-fsm notify test`"
    return event
