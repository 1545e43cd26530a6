"""The ``[notify]`` table (its ``[notify.<name>]`` sinks: a webhook or a command) and the ``[metrics]`` table.

Every bad value is refused when the config is built, one line naming the key, the value and the fix (a URL only
redacted: its path and query are credentials). A sink's secret is never a value of the config: ``secret_env``
names an environment variable and ``secret_file`` a file, read only when an event is signed (``secret``);
``check_secrets`` refuses a submit whose ``secret_env`` is unset. No I/O here but those reads.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from fellows_fsm.core.events import Event
from fellows_fsm.errors import ConfigError
from fellows_fsm.tables import argv_template, positive_seconds, refuse_unknown_keys

__all__ = [
    "COMMAND_ENVIRONMENT",
    "COMMAND_PLACEHOLDERS",
    "EVENTS",
    "MetricsConfig",
    "NotifyConfig",
    "SinkConfig",
    "check_secrets",
    "redact_url",
]

EVENTS = tuple(e.value for e in Event if e is not Event.TEST)
"""Every event a sink may ask for (its default: all of them)."""
COMMAND_PLACEHOLDERS = frozenset({"dispatch_id", "event", "event_id"})
"""A command sink's argv placeholders: values fellows-fsm makes from a safe alphabet (hex digits, our own words)."""
COMMAND_ENVIRONMENT = {
    "dispatch_id": "FSM_DISPATCH_ID",
    "event": "FSM_EVENT",
    "event_id": "FSM_EVENT_ID",
    "at": "FSM_AT",
    "state": "FSM_STATE",
    "job_name": "FSM_JOB_NAME",
    "reason": "FSM_REASON",
    "sink": "FSM_SINK",
}
"""The environment variable of every value a command sink gets (the event as JSON comes on its stdin)."""
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
COMMAND_SINK = "command"
"""The kind of a sink that runs a command (a sink's kind is no lane's: a sink is asked ``runs_command``)."""
_KINDS = ("webhook", COMMAND_SINK)
_FORMATS = ("json", "slack")
_SINK_KEYS = (
    "kind",
    "url",
    "format",
    "secret_env",
    "secret_file",
    "events",
    "timeout_seconds",
    "ca_file",
    "allow_plain_http",
    "command",
)
DEFAULT_GIVE_UP_SECONDS = 86_400.0
"""How long an event is retried at a sink that fails for a reason that may pass (a day), unless configured."""


def redact_url(url: str) -> str:
    """``url`` as it may be shown: its scheme, host and port; its path and query (credentials) hidden."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<an invalid URL>"
    if not parts.scheme or not parts.hostname:
        return "<an invalid URL>"
    hidden = "/…" if parts.path not in ("", "/") or parts.query else ""
    return f"{parts.scheme}://{parts.hostname}{port}{hidden}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(key: str, url: object, *, plain_ok: bool) -> str:
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{key} must be the webhook's address as a string, such as 'https://hooks.example/x'")
    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{key}={shown} is not an http(s) URL; give one such as 'https://hooks.example/x'")
    if parts.scheme == "http" and not _loopback(parts.hostname) and not plain_ok:
        raise ConfigError(
            f"{key}={shown} sends events unencrypted to a host that is not this one; use https, "
            "or set allow_plain_http = true in the same table if the network is trusted"
        )
    return url


def _check_argv(key: str, value: object) -> tuple[str, ...]:
    return argv_template(key, value, "['notify-send', 'fellows-fsm', '{event}']", _check_sink_item)


def _check_sink_item(key: str, item: str) -> None:
    for name in _PLACEHOLDER.findall(item.replace("{{", "").replace("}}", "")):
        if name not in COMMAND_PLACEHOLDERS:
            variable = COMMAND_ENVIRONMENT.get(name)
            fix = (
                f"read it from the environment as ${variable}"
                if variable
                else f"use one of {', '.join('{' + p + '}' for p in sorted(COMMAND_PLACEHOLDERS))}"
            )
            raise ConfigError(f"{key} uses placeholder {{{name}}}, which an argument may not carry; {fix}")
    try:
        item.format_map(dict.fromkeys(COMMAND_PLACEHOLDERS, "x"))
    except (KeyError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(
            f"{key} item {item!r} is not a valid template ({exc}); write placeholders as {{event}} "
            "and a literal brace as {{ or }}"
        ) from None


@attrs.frozen(kw_only=True)
class SinkConfig:
    """One ``[notify.<name>]`` table: where events go (a webhook's URL, or a command's argv) and which ones."""

    name: str
    kind: str
    url: str | None = None
    format: str = "json"
    secret_env: str | None = None
    secret_file: Path | None = None
    events: tuple[str, ...] = EVENTS
    timeout_seconds: float = 10.0
    ca_file: Path | None = None
    allow_plain_http: bool = False
    command: tuple[str, ...] = ()

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> SinkConfig:
        where = f"[notify.{name}]"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table of a sink (kind = 'webhook' or 'command')")
        refuse_unknown_keys(where, table, _SINK_KEYS)
        kind = table.get("kind", "webhook")
        if kind not in _KINDS:
            raise ConfigError(f"{where} kind={kind!r} is not a sink kind; use 'webhook' or 'command'")
        events = table.get("events", list(EVENTS))
        if isinstance(events, str) or not isinstance(events, list | tuple) or not events:
            raise ConfigError(f"{where} events={events!r} must be a non-empty list of event names, e.g. ['ended']")
        for event in events:
            if event not in EVENTS:
                raise ConfigError(f"{where} events has {event!r}, not an event; use any of {', '.join(EVENTS)}")
        values: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "events": tuple(events),
            "timeout_seconds": positive_seconds(
                f"{where} timeout_seconds", table.get("timeout_seconds", 10.0), most=600
            ),
        }
        plain = table.get("allow_plain_http", False)
        if not isinstance(plain, bool):
            raise ConfigError(f"{where} allow_plain_http={plain!r} must be true or false")
        if kind == COMMAND_SINK:
            extra = sorted(set(table) & {"url", "format", "secret_env", "secret_file", "ca_file", "allow_plain_http"})
            if extra:
                raise ConfigError(
                    f"{where} {extra[0]} is a webhook's key; a command sink takes command, events, timeout_seconds"
                )
            if "command" not in table:
                raise ConfigError(
                    f"{where} a command sink needs command = [argv...], e.g. ['notify-send', '{{event}}']"
                )
            values["command"] = _check_argv(f"{where} command", table["command"])
            return cls(**values)
        if "command" in table:
            raise ConfigError(f"{where} command is a command sink's key; set kind = 'command', or give url")
        values["url"] = _check_url(f"{where} url", table.get("url"), plain_ok=plain)
        values["allow_plain_http"] = plain
        fmt = table.get("format", "json")
        if fmt not in _FORMATS:
            raise ConfigError(f"{where} format={fmt!r} is not known; use 'json' or 'slack'")
        values["format"] = fmt
        if "secret_env" in table and "secret_file" in table:
            raise ConfigError(f"{where} has both secret_env and secret_file; keep one")
        if "secret_env" in table:
            env = table["secret_env"]
            if not isinstance(env, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
                raise ConfigError(f"{where} secret_env={env!r} must be the NAME of an environment variable")
            values["secret_env"] = env
        for key in ("secret_file", "ca_file"):
            if key in table:
                path = table[key]
                if not isinstance(path, str) or not path:
                    raise ConfigError(f"{where} {key}={path!r} must be a file path (a string)")
                values[key] = Path(path).expanduser()
        return cls(**values)

    @property
    def runs_command(self) -> bool:
        """Is it a command sink (else a webhook)?"""
        return self.kind == COMMAND_SINK

    @property
    def shown(self) -> str:
        """Where it sends, as it may be shown (a URL redacted)."""
        if self.runs_command:
            return f"command {self.command[0]}"
        return f"{self.format} webhook {redact_url(self.url or '')}"

    def secret(self) -> bytes | None:
        """The HMAC key (None: events are not signed); ConfigError if it is configured and cannot be read."""
        where = f"[notify.{self.name}]"
        if self.secret_env is not None:
            value = os.environ.get(self.secret_env)
            if not value:
                raise ConfigError(
                    f"{where} secret_env={self.secret_env!r} is not set in this environment; export it before "
                    "submitting (its value signs the events), or drop secret_env"
                )
            return value.encode()
        if self.secret_file is not None:
            try:
                value = self.secret_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{where} secret_file={self.secret_file} cannot be read ({exc.strerror})") from None
            if not value:
                raise ConfigError(f"{where} secret_file={self.secret_file} is empty; put the signing key in it")
            return value.encode()
        return None

    def table(self) -> dict[str, Any]:
        """The table ``from_table`` takes (for the journaled driver config: names, never a secret's value)."""
        out: dict[str, Any] = {"kind": self.kind, "events": list(self.events), "timeout_seconds": self.timeout_seconds}
        if self.runs_command:
            out["command"] = list(self.command)
            return out
        out.update(url=self.url, format=self.format, allow_plain_http=self.allow_plain_http)
        for key in ("secret_env", "secret_file", "ca_file"):
            value = getattr(self, key)
            if value is not None:
                out[key] = str(value)
        return out


@attrs.frozen(kw_only=True)
class NotifyConfig:
    """The ``[notify]`` table: its sinks, and how long an event is retried before it is undeliverable."""

    sinks: tuple[SinkConfig, ...] = ()
    give_up_after_seconds: float = DEFAULT_GIVE_UP_SECONDS

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> NotifyConfig:
        sinks = [SinkConfig.from_table(name, t) for name, t in table.items() if isinstance(t, Mapping)]
        scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
        refuse_unknown_keys("[notify]", scalars, ("give_up_after_seconds",))
        give_up = DEFAULT_GIVE_UP_SECONDS
        if "give_up_after_seconds" in scalars:
            give_up = positive_seconds("[notify] give_up_after_seconds", scalars["give_up_after_seconds"])
        return cls(sinks=tuple(sinks), give_up_after_seconds=give_up)

    def sink(self, name: str) -> SinkConfig | None:
        return next((s for s in self.sinks if s.name == name), None)

    def table(self) -> dict[str, Any]:
        return {"give_up_after_seconds": self.give_up_after_seconds, **{s.name: s.table() for s in self.sinks}}


def check_secrets(notify: NotifyConfig) -> None:
    """Refuse (ConfigError, exit 3) a submit whose sink's secret cannot be read here: nothing is queued."""
    for sink in notify.sinks:
        sink.secret()


def _listen(value: object) -> tuple[str, int]:
    key = "[metrics] listen"
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(f"{key}={value!r} must be 'HOST:PORT', such as '127.0.0.1:9464'")
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ConfigError(f"{key}={value!r}: {host!r} is not an IP address; use '127.0.0.1:9464'") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}={value!r}: the port must be a number from 1 to 65535, such as 9464")
    return host, int(port)


@attrs.frozen(kw_only=True)
class MetricsConfig:
    """The ``[metrics]`` table: a node_exporter textfile rewritten each poll, and a /metrics address."""

    textfile: Path | None = None
    listen: tuple[str, int] | None = None

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> MetricsConfig:
        refuse_unknown_keys("[metrics]", table, ("textfile", "listen"))
        textfile = table.get("textfile")
        if textfile is not None and (not isinstance(textfile, str) or not textfile.endswith(".prom")):
            raise ConfigError(
                f"[metrics] textfile={textfile!r} must be a path ending in .prom (node_exporter reads only those), "
                "such as '/var/lib/node_exporter/textfile/fellows.prom'"
            )
        listen = _listen(table["listen"]) if "listen" in table else None
        return cls(textfile=Path(textfile).expanduser() if textfile else None, listen=listen)

    def table(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.textfile is not None:
            out["textfile"] = str(self.textfile)
        if self.listen is not None:
            out["listen"] = f"{self.listen[0]}:{self.listen[1]}"
        return out
