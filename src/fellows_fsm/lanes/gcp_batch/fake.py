"""A fake of the Google Cloud Batch API (v1, REST) on loopback, for tests with no internet: the client library's
endpoint override (``client_options.api_endpoint = fake.endpoint``) points at it.

It speaks the API's published JSON shapes (Job, TaskGroup, Runnable, AllocationPolicy, JobStatus, the
``{"error": {code, message, status}}`` body), records every request, and changes a job's state only when a test
says so (``move``). It is standard library only, so it ships without the ``[gcp]`` extra; it never talks to Google.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs

from fellows_fsm.clock import Clock

__all__ = ["STATES", "FakeBatchApi", "Fault", "Recorded"]

STATES = ("QUEUED", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "DELETION_IN_PROGRESS")
"""The JobStatus states of Batch v1 a test moves a job through (newer API versions add the cancel states)."""

JOB_ID = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
"""The API's rule for a caller's job id (``jobId``): lower case, digits and dashes, at most 63 characters."""

ACCELERATORS = frozenset(
    {
        "nvidia-tesla-t4",
        "nvidia-tesla-v100",
        "nvidia-tesla-p100",
        "nvidia-tesla-p4",
        "nvidia-tesla-a100",
        "nvidia-a100-80gb",
        "nvidia-l4",
        "nvidia-h100-80gb",
        "nvidia-h100-mega-80gb",
        "nvidia-h200-141gb",
        "nvidia-b200",
    }
)
MACHINE_FAMILIES = ("n1-", "n2-", "e2-", "a2-", "a3-", "a4-", "g2-", "c2-", "c3-")

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
_LABEL_TERM = re.compile(r'^labels\.([a-z][a-z0-9_]*)\s*=\s*"([^"]*)"$')


@attrs.frozen
class Recorded:
    """One request the fake received: its method (``create``, ``get``, ``list``, ``delete``), HTTP verb, path,
    query (each key's first value) and JSON body (None without one)."""

    method: str
    verb: str
    path: str
    query: dict[str, str]
    body: dict[str, Any] | None


@attrs.frozen
class Fault:
    """What the fake does to the next matching request instead of (or after) answering it.

    ``status``: answer with this HTTP error (403, 429, 500...) and do nothing. ``lose_reply``: do the work, then
    close the connection without a reply (a reply lost on the way back). ``hang``: hold the request (doing nothing)
    until the client gives up, then close the connection. ``hold_reply``: do the work, then hold the reply the same
    way (a create made whose caller never hears of it: a driver killed meanwhile).
    """

    method: str | None = None
    status: int | None = None
    lose_reply: bool = False
    hang: bool = False
    hold_reply: bool = False
    message: str = "injected by the test"


class FakeBatchApi:
    """The Batch API of one or more projects and locations, on ``http://127.0.0.1:<port>``.

    ``start()`` binds and serves from a thread (the constructor does no I/O); ``close()`` stops it. Use as a
    context manager. ``jobs`` maps a job's full name to its JSON; ``requests`` lists every request in order;
    ``calls["list"]`` counts list calls.
    """

    def __init__(self, *, clock: Clock | None = None, max_page_size: int = 1000, filters: bool = True) -> None:
        self._clock = clock
        self.max_page_size = max_page_size
        self.filters = filters
        """False: every list filter is answered 400 INVALID_ARGUMENT (an API that does not read label filters)."""
        self.jobs: dict[str, dict[str, Any]] = {}
        self.requests: list[Recorded] = []
        self.calls: Counter[str] = Counter()
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeBatchApi:
        """Bind a free loopback port and serve from a daemon thread."""
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-batch-api", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Release any held request and stop serving."""
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeBatchApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        """The URL to give the client library as its ``api_endpoint``."""
        if self._server is None:
            raise RuntimeError("FakeBatchApi is not started: call start() or use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # ------------------------------------------------------------------ what a test does
    def inject(self, *faults: Fault) -> None:
        """Queue faults: each applies once, to the next request of its method (any method when None)."""
        with self._lock:
            self._faults.extend(faults)

    def move(self, job: str, state: str, *, description: str = "", run_seconds: float | None = None) -> None:
        """Move a job (its full name, or its job id when only one project and location hold it) to ``state``,
        with a status event; ``run_seconds`` sets the job's ``runDuration``."""
        if state not in STATES:
            raise ValueError(f"unknown Batch job state {state!r}: one of {', '.join(STATES)}")
        with self._lock:
            found = self._job(job)
            self._set_state(found["name"], state, description)
            if run_seconds is not None:
                found["status"]["runDuration"] = f"{run_seconds:g}s"

    def remove(self, job: str) -> None:
        """Make a job disappear, as a deletion that finished (or someone else's delete) does."""
        with self._lock:
            del self.jobs[self._job(job)["name"]]

    def requests_of(self, method: str) -> list[Recorded]:
        """The recorded requests of one method, in order."""
        with self._lock:
            return [r for r in self.requests if r.method == method]

    # ------------------------------------------------------------------ the API
    def handle(self, verb: str, target: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], Fault | None]:
        """Answer one request: (HTTP status, JSON body, the fault to apply on the way out or None)."""
        split = urlsplit(target)
        query = {key: values[0] for key, values in parse_qs(split.query).items()}
        method, parent, job_id = _route(verb, split.path)
        with self._lock:
            self.requests.append(Recorded(method, verb, split.path, query, body))
            self.calls[method] += 1
            fault = self._take_fault(method)
        if fault is not None and fault.status is not None:
            return fault.status, _error(fault.status, fault.message), None
        if fault is not None and fault.hang:
            return 0, {}, fault
        with self._lock:
            code, answer = self._answer(method, parent, job_id, query, body)
        return code, answer, fault

    def _answer(
        self, method: str, parent: str, job_id: str, query: dict[str, str], body: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        if method == "create":
            return self._create(parent, query, body or {})
        if method == "list":
            return self._list(parent, query)
        name = f"{parent}/jobs/{job_id}"
        if method == "get":
            if name not in self.jobs:
                return 404, _error(404, f'Resource "{name}" was not found')
            return 200, self.jobs[name]
        if method == "delete":
            if name not in self.jobs:
                return 404, _error(404, f'Job "{name}" not found')
            if self.jobs[name]["status"]["state"] != "DELETION_IN_PROGRESS":
                self._set_state(name, "DELETION_IN_PROGRESS")
            op = f"{parent}/operations/operation-{uuid.uuid4().hex[:12]}"
            return 200, {"name": op, "done": False}
        return 404, _error(404, f"no such method {method}")

    def _set_state(self, name: str, state: str, description: str = "") -> None:
        job = self.jobs[name]
        status = job["status"]
        event = description or f"Job state is set from {status['state']} to {state}."
        status["statusEvents"].append({"type": "STATUS_CHANGED", "description": event, "eventTime": self._stamp()})
        status["state"] = state
        job["updateTime"] = self._stamp()

    def _create(self, parent: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        job_id = query.get("jobId", "")
        if not JOB_ID.match(job_id):
            return 400, _error(400, f"Job id {job_id!r} is invalid: it must match {JOB_ID.pattern}")
        name = f"{parent}/jobs/{job_id}"
        if name in self.jobs:
            return 409, _error(409, f'Resource "{name}" already exists')
        if not body.get("taskGroups"):
            return 400, _error(400, "Field taskGroups is required")
        for instance in body.get("allocationPolicy", {}).get("instances", []):
            policy = instance.get("policy", {})
            machine = policy.get("machineType", "")
            if machine and not machine.startswith(MACHINE_FAMILIES):
                return 400, _error(400, f"Invalid value for field 'machineType': '{machine}'. Unknown machine type.")
            for accelerator in policy.get("accelerators", []):
                kind = accelerator.get("type", "")
                if kind not in ACCELERATORS:
                    return 400, _error(400, f"Invalid value for field 'accelerators.type': '{kind}'.")
        now = self._stamp()
        job = {
            **body,
            "name": name,
            "uid": f"{job_id[:50]}-{uuid.uuid4().hex[:8]}",
            "createTime": now,
            "updateTime": now,
            "status": {
                "state": "QUEUED",
                "statusEvents": [
                    {"type": "STATUS_CHANGED", "description": "Job state is set from  to QUEUED.", "eventTime": now}
                ],
            },
        }
        self.jobs[name] = job
        return 200, job

    def _list(self, parent: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if query.get("filter") and not self.filters:
            return 400, _error(400, f"Invalid filter: {query['filter']!r}")
        try:
            wanted = _labels_wanted(query.get("filter", ""))
        except ValueError as error:
            return 400, _error(400, str(error))
        size = min(int(query.get("pageSize") or self.max_page_size), self.max_page_size)
        start = int(query.get("pageToken") or 0)
        matching = [
            job
            for name, job in sorted(self.jobs.items())
            if name.startswith(f"{parent}/jobs/")
            and all(job.get("labels", {}).get(key) == value for key, value in wanted.items())
        ]
        page: dict[str, Any] = {"jobs": matching[start : start + size]}
        if start + size < len(matching):
            page["nextPageToken"] = str(start + size)
        return 200, page

    # ------------------------------------------------------------------ helpers
    def _take_fault(self, method: str) -> Fault | None:
        for index, fault in enumerate(self._faults):
            if fault.method in (None, method):
                return self._faults.pop(index)
        return None

    def _job(self, job: str) -> dict[str, Any]:
        if job in self.jobs:
            return self.jobs[job]
        named = [found for name, found in self.jobs.items() if name.rsplit("/", 1)[-1] == job]
        if len(named) != 1:
            raise KeyError(f"the fake holds {len(named)} jobs named {job!r}: give the full name")
        return named[0]

    def _stamp(self) -> str:
        now = self._clock.now() if self._clock is not None else time.time()
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"

    def wait_released(self, seconds: float) -> None:
        """Hold a hanging request until the fake closes or ``seconds`` pass."""
        self._released.wait(seconds)


def _route(verb: str, path: str) -> tuple[str, str, str]:
    """(method, parent, job id) of a Batch v1 REST path; method "unknown" for any other path."""
    match = re.fullmatch(r"/v1/(projects/[^/]+/locations/[^/]+)/jobs(?:/([^/:]+))?", path)
    if match is None:
        return "unknown", "", ""
    parent, job_id = match.group(1), match.group(2) or ""
    method = {("POST", False): "create", ("GET", False): "list", ("GET", True): "get", ("DELETE", True): "delete"}
    return method.get((verb, bool(job_id)), "unknown"), parent, job_id


def _labels_wanted(text: str) -> dict[str, str]:
    """The label equalities of a list filter (``labels.k="v" AND ...``): the part of AIP-160 the lane uses."""
    wanted: dict[str, str] = {}
    for term in (t.strip() for t in re.split(r"\s+AND\s+", text.strip()) if text.strip()):
        match = _LABEL_TERM.match(term)
        if match is None:
            raise ValueError(f'Invalid filter term {term!r}: the fake reads only labels.KEY="VALUE" joined by AND')
        wanted[match.group(1)] = match.group(2)
    return wanted


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}


class _Handler(BaseHTTPRequestHandler):
    api: FakeBatchApi
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    """TCP_NODELAY: the headers and the body are two writes, and with Nagle on the body waits for the client's
    delayed ACK of the headers on a kept-alive connection (about 40 ms a request), which no real API adds."""

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the fake's record is ``requests``, not stderr."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        code, answer, fault = self.api.handle(self.command, self.path, body)
        if fault is not None and (fault.hang or fault.hold_reply):
            self.api.wait_released(30.0)
        if fault is not None and (fault.hang or fault.hold_reply or fault.lose_reply):
            self.close_connection = True
            return
        payload = json.dumps(answer).encode()
        self.send_response(code, HTTPStatus(code).phrase)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _serve  # noqa: N815 (http.server's names)
