"""The few Google Cloud Batch API calls a ``gcp-batch`` lane makes: create a job named from its dispatch (never
twice), list the lane's jobs in one call, get one, delete one; retried where that is safe, each failure one line.

Google's client library (the ``[gcp]`` extra) is imported only when a client is made: importing this module, or
the core install, never needs it. Nothing here journals or decides: the lane does, from what these calls answer.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from fellows_fsm.errors import CredentialsMissing
from fellows_fsm.lanes.gcp_batch.errors import BatchError, BatchRefused, BatchUnavailable
from fellows_fsm.lanes.gcp_batch.machines import Machine
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "LABEL_DISPATCH",
    "LABEL_LANE",
    "Backoff",
    "BatchClient",
    "BatchJob",
    "BatchJobRequest",
    "BatchLocation",
    "check_credentials",
    "job_id_for",
    "label_value",
]

log = logging.getLogger(__name__)

LABEL_LANE = "fellows_fsm_lane"
"""The label that names a job's lane: the one list call filters on it (an underscore key: AIP-160 filters read
``labels.fellows_fsm_lane`` as one field, where a dash would be an operator)."""
LABEL_DISPATCH = "fellows_fsm_dispatch"
"""The label that names a job's dispatch: a job found under a dispatch's name must carry it."""
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
PAGE_SIZE = 1000
"""Jobs asked for per list page: one call answers for a lane's paid jobs up to this many."""
RETRIED_CODES = frozenset({429, 500, 502, 503, 504})
_CREDENTIALS_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"

T = TypeVar("T")


@attrs.frozen
class BatchLocation:
    """Where a lane's jobs go: a project, a region (the API's location) and, optionally, one zone of it."""

    project: str
    region: str
    zone: str | None = None

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def allowed_locations(self) -> list[str]:
        return [f"zones/{self.zone}"] if self.zone else [f"regions/{self.region}"]


_NAME_OK = re.compile(r"^[a-z0-9-]{1,40}$")


def job_id_for(dispatch_id: str) -> str:
    """The Batch job id of a dispatch: ``fsm-<dispatch id>``, the same on every try, so a create that is tried
    again finds the first. An id the API's alphabet cannot hold as it is gets a digest of itself appended, so two
    such ids never share a name."""
    if _NAME_OK.match(dispatch_id) and not dispatch_id.endswith("-"):
        return f"fsm-{dispatch_id}"
    digest = hashlib.sha256(dispatch_id.encode()).hexdigest()[:10]
    kept = re.sub(r"[^a-z0-9-]+", "-", dispatch_id.lower()).strip("-")[:40]
    return f"fsm-{kept}-{digest}" if kept else f"fsm-{digest}"


def label_value(text: str) -> str:
    """``text`` as a GCP label value (lower case letters, digits, ``_`` and ``-``, at most 63 characters)."""
    value = re.sub(r"[^a-z0-9_-]", "-", text.lower())
    if value == text and len(value) <= 63:
        return value
    return f"{value[:52]}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


@attrs.frozen
class BatchJobRequest:
    """What the lane hands Batch for one dispatch: the script's text as the runnable, its GPUs and time limit."""

    dispatch_id: str
    lane: str
    script: str
    gpus: int
    time_limit_seconds: int | None = None

    @classmethod
    def from_spec(cls, dispatch_id: str, lane: str, spec: JobSpec) -> BatchJobRequest:
        """The request for a dispatch's job (its script read from the file the job names)."""
        base = Path(spec.workdir) if spec.workdir else Path.cwd()
        text = (base / spec.script_file).read_text(encoding="utf-8")
        return cls(dispatch_id, lane, text, spec.gpus, spec.time_limit_seconds)


def job_body(request: BatchJobRequest, machine: Machine, location: BatchLocation) -> dict[str, Any]:
    """The Batch Job (the client library's field names) for a request: one task, one VM, the GPU drivers
    installed, logs to Cloud Logging, the lane and dispatch as labels, ``maxRunDuration`` from the time limit."""
    task_spec: dict[str, Any] = {"runnables": [{"script": {"text": request.script}}], "max_retry_count": 0}
    if request.time_limit_seconds is not None:
        task_spec["max_run_duration"] = {"seconds": request.time_limit_seconds}
    policy: dict[str, Any] = {"machine_type": machine.machine_type}
    if machine.accelerator is not None:
        policy["accelerators"] = [{"type_": machine.accelerator, "count": machine.count}]
    return {
        "task_groups": [{"task_spec": task_spec, "task_count": 1}],
        "allocation_policy": {
            "location": {"allowed_locations": location.allowed_locations},
            "instances": [{"policy": policy, "install_gpu_drivers": machine.accelerator is not None}],
        },
        "labels": {LABEL_LANE: label_value(request.lane), LABEL_DISPATCH: label_value(request.dispatch_id)},
        "logs_policy": {"destination": "CLOUD_LOGGING"},
    }


@attrs.frozen
class BatchJob:
    """One Batch job as the API last described it."""

    job_id: str
    name: str
    uid: str
    state: str
    """The API's state word: QUEUED, SCHEDULED, RUNNING, SUCCEEDED, FAILED, DELETION_IN_PROGRESS (or newer)."""
    labels: Mapping[str, str]
    note: str = ""
    """The description of its latest status event (why it is in its state, in the API's words)."""
    run_seconds: float | None = None
    """How long it has been RUNNING, as the API counts it (None before it ran)."""

    @classmethod
    def from_api(cls, job: Any) -> BatchJob:
        state = job.status.state
        events = list(job.status.status_events)
        duration = job.status.run_duration
        seconds = duration.total_seconds() if duration else 0.0
        name = str(job.name)
        return cls(
            job_id=name.rsplit("/", 1)[-1],
            name=name,
            uid=str(job.uid),
            state=str(getattr(state, "name", state)),
            labels={str(k): str(v) for k, v in job.labels.items()},
            note=_one_line(str(events[-1].description)) if events else "",
            run_seconds=seconds if seconds > 0 else None,
        )


@attrs.frozen
class Backoff:
    """How often a call is tried and how long to wait between tries (doubling, capped)."""

    attempts: int = 5
    first_seconds: float = 1.0
    max_seconds: float = 30.0

    def delays(self) -> Iterator[float]:
        """The waits between tries: one fewer than the attempts."""
        for n in range(self.attempts - 1):
            yield min(self.first_seconds * 2**n, self.max_seconds)


def _one_line(text: str) -> str:
    return " ".join(text.split())


_REQUEST_PREFIX = re.compile(r"^(?:GET|POST|DELETE|PATCH|PUT) \S+: ")


def _api_message(error: Any) -> str:
    """The API's own words in an error (the REST transport puts the request's method and URL before them)."""
    return _REQUEST_PREFIX.sub("", _one_line(str(getattr(error, "message", "") or error)))


def check_credentials() -> None:
    """Find the user's application default credentials, as a client would (nothing is sent to Batch; on a machine
    with no key file or gcloud login, google-auth asks the GCE metadata server); raise CredentialsMissing when
    there are none."""
    _default_credentials()


_NO_LIBRARY = "the GCP Batch lane needs Google's client library: pip install 'fellows-fsm[gcp]'"


def _default_credentials() -> Any:
    try:
        import google.auth  # noqa: PLC0415 (the [gcp] extra, imported only when a lane needs it)
        from google.auth.exceptions import DefaultCredentialsError  # noqa: PLC0415
    except ImportError:
        raise BatchError(_NO_LIBRARY) from None

    try:
        credentials, _project = google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError as error:
        raise CredentialsMissing(
            f"no Google credentials for the GCP Batch lane ({_api_message(error)}): {_CREDENTIALS_HINT}"
        ) from None
    return credentials


class BatchClient:
    """The Batch API of one lane's project and region. The constructor takes a ready client library client and
    does no I/O; ``connect`` makes one (credentials, endpoint). ``sleep`` is looked up at call time (tests give a
    recorder, so no test waits out a backoff)."""

    def __init__(
        self,
        location: BatchLocation,
        api: Any,
        *,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] | None = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.location = location
        self._api = api
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._timeout = timeout_seconds
        self._filter_ok = True  # until the API calls the label filter invalid

    @classmethod
    def connect(
        cls,
        location: BatchLocation,
        *,
        endpoint: str | None = None,
        anonymous: bool = False,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] | None = None,
        timeout_seconds: float = 30.0,
    ) -> BatchClient:
        """A client over the library's REST transport, on the user's application default credentials (or, for a
        fake at ``endpoint``, anonymous ones: never towards Google itself)."""
        if anonymous and not endpoint:
            raise BatchError("anonymous credentials are only for a fake Batch API: give its endpoint too")
        try:
            from google.api_core.client_options import ClientOptions  # noqa: PLC0415
            from google.cloud import batch_v1  # noqa: PLC0415
        except ImportError:
            raise BatchError(_NO_LIBRARY) from None
        if anonymous:
            from google.auth import credentials as google_credentials  # noqa: PLC0415

            anonymous_credentials: Any = google_credentials.AnonymousCredentials  # untyped in google-auth
            credentials: Any = anonymous_credentials()
        else:
            credentials = _default_credentials()
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        api = batch_v1.BatchServiceClient(credentials=credentials, transport="rest", client_options=options)
        return cls(location, api, backoff=backoff, sleep=sleep, timeout_seconds=timeout_seconds)

    def _name(self, job_id: str) -> str:
        return f"{self.location.parent}/jobs/{job_id}"

    def _where(self) -> str:
        return f"project {self.location.project}, region {self.location.region}"

    # ------------------------------------------------------------------ the calls
    def create(self, request: BatchJobRequest, machine: Machine) -> BatchJob:
        """Create the dispatch's job under its name, or find the one a try before made (a lost reply, a crash):
        never a second job. A job of that name that is not this dispatch's is refused, never touched."""
        from google.cloud import batch_v1  # noqa: PLC0415

        job_id = job_id_for(request.dispatch_id)
        name = self._name(job_id)
        call = {
            "parent": self.location.parent,
            "job_id": job_id,
            "job": batch_v1.Job(job_body(request, machine, self.location)),
            "request_id": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        }
        try:
            made = self._call("create", job_id, lambda: self._api.create_job(request=call, **self._per_call()), 409)
        except BatchRefused as refused:
            if refused.code == 400:
                raise self._invalid(job_id, machine, refused.api_message) from None
            raise
        if made is not None:
            return BatchJob.from_api(made)
        found = self.get(job_id)
        if found is None:
            raise BatchRefused(
                f"Batch job {job_id} ({self._where()}) existed at create and is gone now (deleted outside):"
                " it is not created again"
            )
        if found.labels.get(LABEL_DISPATCH) != label_value(request.dispatch_id):
            raise BatchRefused(
                f"a Batch job named {job_id} ({self._where()}) exists and is not dispatch {request.dispatch_id}'s"
                f" (its {LABEL_DISPATCH} label is {found.labels.get(LABEL_DISPATCH)!r}): nothing was created"
            )
        log.info("Batch job %s already existed (an earlier try made it): not created again", job_id)
        return found

    def get(self, job_id: str) -> BatchJob | None:
        """The job now, or None when the API has no such job."""
        found = self._call("get", job_id, lambda: self._api.get_job(name=self._name(job_id), **self._per_call()), 404)
        return None if found is None else BatchJob.from_api(found)

    def jobs(self, lane: str) -> list[BatchJob]:
        """Every job of ``lane`` in the project and region, from ONE list call (a page of up to PAGE_SIZE jobs;
        a page more for each PAGE_SIZE after that), filtered on the lane's label. An API that refuses the filter
        as invalid is asked once more without it, and never with it again: the labels are checked here anyway."""
        value = label_value(lane)
        request: dict[str, Any] = {"parent": self.location.parent, "page_size": PAGE_SIZE}
        if self._filter_ok:
            request["filter"] = f'labels.{LABEL_LANE}="{value}"'
        try:
            listed = self._call(
                "list", f"lane {lane}'s jobs", lambda: list(self._api.list_jobs(request=request, **self._per_call()))
            )
        except BatchRefused as refused:
            if refused.code != 400 or not self._filter_ok:
                raise
            log.warning("GCP Batch refused the list filter (%s): listing without it", refused.api_message)
            self._filter_ok = False
            return self.jobs(lane)
        jobs = [BatchJob.from_api(job) for job in listed or []]
        return [job for job in jobs if job.labels.get(LABEL_LANE) == value]

    def delete(self, job_id: str) -> bool:
        """Delete the job (it goes DELETION_IN_PROGRESS, then away); False when it was already gone."""
        request = {
            "name": self._name(job_id),
            "reason": "cancelled by fellows-fsm",
            "request_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"delete {self._name(job_id)}")),
        }
        found = self._call("delete", job_id, lambda: self._api.delete_job(request=request, **self._per_call()), 404)
        return found is not None

    # ------------------------------------------------------------------ the one retry loop
    def _per_call(self) -> dict[str, Any]:
        return {"retry": None, "timeout": self._timeout}  # our backoff only: the library's own stays off

    def _call(self, what: str, target: str, fn: Callable[[], T], absent: int | None = None) -> T | None:
        """``fn()``, tried again after a 429/5xx, a timeout or a lost connection (each call here is safe to
        repeat: a create by its name, a delete of a name); None when the API answers ``absent`` (404, 409)."""
        from google.api_core import exceptions as api  # noqa: PLC0415
        from google.auth import exceptions as auth  # noqa: PLC0415

        delays = self._backoff.delays()
        reached = False
        while True:
            try:
                return fn()
            except api.GoogleAPICallError as error:
                code = int(error.code or 0)
                if absent is not None and code == absent:
                    return None
                if code == 401:
                    raise CredentialsMissing(
                        f"GCP Batch refused the credentials ({self._where()}): {_api_message(error)}: "
                        f"{_CREDENTIALS_HINT}"
                    ) from None
                if code == 403:
                    raise BatchRefused(
                        f"GCP Batch denied {what} of {target} ({self._where()}): {_api_message(error)}: grant the"
                        " Batch Job Editor role (roles/batch.jobsEditor) on the project, or check the project id",
                        code=code,
                        api_message=_api_message(error),
                    ) from None
                if code not in RETRIED_CODES:
                    raise BatchRefused(
                        f"GCP Batch refused {what} of {target} ({self._where()}): HTTP {code}: {_api_message(error)}",
                        code=code,
                        api_message=_api_message(error),
                    ) from None
                last = f"HTTP {code}: {_api_message(error)}"
                reached = reached or code >= 500
            except auth.DefaultCredentialsError as error:
                raise CredentialsMissing(
                    f"no Google credentials ({_api_message(error)}): {_CREDENTIALS_HINT}"
                ) from None
            except auth.RefreshError as error:
                raise CredentialsMissing(
                    f"the Google credentials could not be refreshed ({_api_message(error)}): {_CREDENTIALS_HINT}"
                ) from None
            except (OSError, auth.TransportError) as error:  # requests' Timeout and ConnectionError are OSErrors
                last = "no answer in time" if "Timeout" in type(error).__name__ else "the connection was lost"
                reached = True
            delay = next(delays, None)
            if delay is None:
                tries = f"{self._backoff.attempts} {'try' if self._backoff.attempts == 1 else 'tries'}"
                maybe = reached and what == "create"
                made = " (the job may have been made: a create by its name finds it)" if maybe else ""
                raise BatchUnavailable(
                    f"GCP Batch did not answer {what} of {target} ({self._where()}) after {tries} (last:"
                    f" {last}){made}: try again later",
                    maybe_made=maybe,
                )
            log.warning("GCP Batch %s of %s: %s; trying again in %.0f s", what, target, last, delay)
            (self._sleep or time.sleep)(delay)

    def _invalid(self, job_id: str, machine: Machine, said: str) -> BatchRefused:
        """A create the API called invalid, in plain words: the machine type or accelerator it did not take."""
        words = said.lower().replace("_", "")
        if "machinetype" in words:
            what = f"machine type {machine.machine_type!r}"
        elif "accelerator" in words and machine.accelerator is not None:
            what = f"accelerator {machine.accelerator!r}"
        else:
            what = f"job {job_id} as it is"
        return BatchRefused(
            f"GCP Batch does not accept {what} in {self._where()} (the job asked for {machine.words()};"
            f" the API said: {said}): set the lane's accelerator and machine_type to ones the region offers",
            code=400,
            api_message=said,
        )
