"""Sending one event to one sink, once: a webhook (httpx, TLS verified, explicit connect/read timeouts, no redirect
to another host) or a command (an argv, never a shell, its values in FSM_* variables, the event on stdin, bounded
by its timeout). The answer says whether it arrived, and if not whether a retry may help. A URL is shown redacted,
a secret never."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import attrs

from fellows_fsm.config.notify import COMMAND_ENVIRONMENT, SinkConfig, redact_url
from fellows_fsm.errors import ConfigError
from fellows_fsm.notify.envelope import headers, slack_text

if TYPE_CHECKING:
    import httpx

__all__ = ["Answer", "SinkClient"]

_RETRIED = frozenset({408, 429})
_REDIRECTS = 3


@attrs.frozen
class Answer:
    """What one attempt got: ``ok`` (delivered), else whether a retry may help (``retry``), and in words."""

    ok: bool
    retry: bool
    said: str


def _retryable_status(code: int) -> bool:
    return code in _RETRIED or code >= 500


class SinkClient:
    """One sink's sending end (a webhook's httpx client, kept open), for the one thread that sends to it."""

    def __init__(self, sink: SinkConfig, *, hidden: frozenset[str] = frozenset()) -> None:
        """``hidden``: the environment variables a command sink must not get (every sink's ``secret_env``)."""
        self.sink = sink
        self.hidden = hidden
        self._client: httpx.Client | None = None

    def _http(self) -> httpx.Client:
        import httpx  # noqa: PLC0415 - its package imports click and rich: loaded only when a webhook is sent

        if self._client is None:
            verify: ssl.SSLContext | bool = True
            if self.sink.ca_file is not None:
                verify = ssl.create_default_context(cafile=str(self.sink.ca_file))
            timeout = httpx.Timeout(self.sink.timeout_seconds, connect=min(self.sink.timeout_seconds, 10.0))
            self._client = httpx.Client(timeout=timeout, verify=verify, follow_redirects=False, trust_env=False)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def send(self, event: str, event_id: str, dispatch_id: str, body: str) -> Answer:
        """Send the envelope ``body`` (its exact bytes, for the JSON format) once."""
        try:
            if self.sink.runs_command:
                return self._run(event, event_id, dispatch_id, body)
            return self._post(event, event_id, body)
        except ConfigError as exc:  # its secret cannot be read now: a later attempt may find it
            return Answer(False, True, str(exc))

    # ----------------------------------------------------------------------------------------------- a webhook
    def _post(self, event: str, event_id: str, body: str) -> Answer:
        import httpx  # noqa: PLC0415 - see _http

        sink = self.sink
        payload = (
            body.encode() if sink.format == "json" else json.dumps({"text": slack_text(json.loads(body))}).encode()
        )
        sent = headers(event, event_id, payload, sink.secret())
        url = sink.url or ""
        origin = urlsplit(url)
        for _ in range(_REDIRECTS + 1):
            try:
                response = self._http().post(url, content=payload, headers=sent)
            except httpx.TimeoutException:
                return Answer(False, True, f"no answer within {sink.timeout_seconds:g} s")
            except httpx.HTTPError as exc:
                return Answer(False, True, self._words(exc))
            code = response.status_code
            if 300 <= code < 400 and "location" in response.headers:
                target = urljoin(url, response.headers["location"])
                there = urlsplit(target)
                if (there.scheme, there.hostname, there.port) != (origin.scheme, origin.hostname, origin.port):
                    return Answer(
                        False, False, f"HTTP {code}: a redirect to another host ({redact_url(target)}), refused"
                    )
                url = target
                continue
            said = f"HTTP {code}"
            if 200 <= code < 300:
                return Answer(True, False, said)
            return Answer(False, _retryable_status(code), said)
        return Answer(False, False, f"more than {_REDIRECTS} redirects")

    def _words(self, exc: Exception) -> str:
        said = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return said.replace(self.sink.url or "\0", redact_url(self.sink.url or ""))

    # ----------------------------------------------------------------------------------------------- a command
    def _run(self, event: str, event_id: str, dispatch_id: str, body: str) -> Answer:
        sink = self.sink
        envelope: dict[str, Any] = json.loads(body)
        dispatch = envelope.get("dispatch") or {}
        values = {
            "dispatch_id": dispatch_id,
            "event": event,
            "event_id": event_id,
            "at": str(envelope.get("at", "")),
            "state": str(dispatch.get("state") or ""),
            "job_name": str(dispatch.get("name") or ""),
            "reason": str(envelope.get("reason") or ""),
            "sink": sink.name,
        }
        argv = [item.format_map({k: values[k] for k in ("dispatch_id", "event", "event_id")}) for item in sink.command]
        kept = {k: v for k, v in os.environ.items() if k not in self.hidden}  # no sink's secret reaches a command
        env = {**kept, **{COMMAND_ENVIRONMENT[k]: v for k, v in values.items()}}
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            return Answer(False, False, f"{argv[0]} cannot be run: {exc.strerror}")
        try:
            _, err = proc.communicate(body.encode(), timeout=sink.timeout_seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Answer(False, True, f"{argv[0]} did not end within {sink.timeout_seconds:g} s (killed)")
        if proc.returncode == 0:
            return Answer(True, False, "exit 0")
        tail = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
        return Answer(False, True, f"exit {proc.returncode}" + (f": {tail[0][:200]}" if tail else ""))
