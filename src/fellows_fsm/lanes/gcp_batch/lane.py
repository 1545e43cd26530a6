"""The GCP Batch lane kind (``kind = "gcp-batch"``): a dispatch handed to it becomes ONE Batch job named from its
dispatch id (lanes/gcp_batch/client.py), followed by one list call a poll for all of the lane's jobs, and deleted on
``cancel``. Its table, its lane (``GcpBatchLane``, a ``PaidLane``) and its kind (``GCP_BATCH``, the registry's entry).

It never blocks the driver's poll loop: the create runs in a thread of its own (the handoff), a look or a delete is
one short attempt; it never makes a second job for a dispatch (the name is the idempotency key) and journals nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fellows_fsm.core.paid import PaidLook
from fellows_fsm.core.vocab import PaidStatus
from fellows_fsm.errors import (
    FellowsError,
    LaneError,
    PaidLaneError,
)
from fellows_fsm.lanes.gcp_batch.client import (
    LABEL_DISPATCH,
    Backoff,
    BatchClient,
    BatchJobRequest,
    job_id_for,
    label_value,
)
from fellows_fsm.lanes.gcp_batch.config import KEYS, KIND, GcpBatchSettings
from fellows_fsm.lanes.gcp_batch.errors import BatchUnavailable
from fellows_fsm.lanes.gcp_batch.machines import machine_for
from fellows_fsm.lanes.handoff import HandoffFiles, HandoffResult, LogsWay, Started
from fellows_fsm.scheduler.port import JobSpec

__all__ = [
    "CALL_TIMEOUT_SECONDS",
    "GCP_BATCH",
    "POLL_TIMEOUT_SECONDS",
    "STATUS_OF",
    "CreateHandoff",
    "GcpBatchKind",
    "GcpBatchLane",
]

log = logging.getLogger(__name__)

CALL_TIMEOUT_SECONDS = 60.0
"""The longest one create call may take before it is tried again (shorter when the lane's timeout_seconds is)."""
POLL_TIMEOUT_SECONDS = 10.0
"""The one attempt of a look, a delete or an ``already_has``: the driver's poll never waits out a backoff."""
STATUS_OF: Mapping[str, PaidStatus] = {
    "QUEUED": PaidStatus.QUEUED,
    "SCHEDULED": PaidStatus.QUEUED,
    "RUNNING": PaidStatus.RUNNING,
    "SUCCEEDED": PaidStatus.SUCCEEDED,
    "FAILED": PaidStatus.FAILED,
    "DELETION_IN_PROGRESS": PaidStatus.CANCELLED,
    # newer API versions cancel a job in place (`gcloud batch jobs cancel`): someone else's cancel
    "CANCELLATION_IN_PROGRESS": PaidStatus.CANCELLED,
    "CANCELLED": PaidStatus.CANCELLED,
}
"""The Batch API's job states as the paid run reads them; any other word (STATE_UNSPECIFIED...) is UNKNOWN."""

_COMMAND = ("gcp-batch", "create")


# --------------------------------------------------------------------------- the handoff: one create, in a thread
class CreateHandoff:
    """One create of a dispatch's Batch job, under way in a thread of its own: ``result`` is None until the call
    ended, or until ``timeout_seconds`` passed (then the handoff is lost: the create may have been made, and the
    driver asks ``already_has``). ``pid`` is None: nothing runs as a process."""

    pid: int | None = None

    def __init__(self, argv: tuple[str, ...], *, started_at: float | None, timeout_seconds: float) -> None:
        self.argv = argv
        self._deadline = None if started_at is None else started_at + timeout_seconds
        self._timeout = timeout_seconds
        self._done: HandoffResult | None = None
        self._thread: threading.Thread | None = None

    def begin(self, create: Callable[[], HandoffResult]) -> CreateHandoff:
        """Start ``create`` in a daemon thread (a driver that exits mid-call leaves a create its successor
        repeats by name) and return at once."""

        def run() -> None:
            self._done = create()

        self._thread = threading.Thread(target=run, name=" ".join(self.argv[:3]), daemon=True)
        self._thread.start()
        return self

    def result(self, now: float) -> HandoffResult | None:
        """The create's result once it ended; a lost one once ``timeout_seconds`` passed without an answer."""
        if self._done is not None:
            return self._done
        if self._deadline is None:  # adopted: the time counts from the first look of this driver
            self._deadline = now + self._timeout
        if now < self._deadline:
            return None
        job = self.argv[2] if len(self.argv) > 2 else "the job"
        line = f"GCP Batch did not answer the create of {job} within {self._timeout:g} s (it may have made it)"
        return HandoffResult(self.argv, None, "", line)

    def wait(self, seconds: float | None = None) -> None:
        """Block until the create's thread ended (or ``seconds`` passed): for tests and a driver's shutdown."""
        if self._thread is not None:
            self._thread.join(seconds)


class GcpBatchLane:
    """A lane that hands a job to GCP Batch and follows it there (``PaidLane``). The constructor does no I/O: the
    clients connect when first used. ``sleep`` and ``backoff`` are the create's (tests record the waits)."""

    kind = KIND
    walks_ladder = False
    follows = True
    stops_at_limit = True  # the job's maxRunDuration is its time limit (batch_client.py)
    """Its jobs are followed to their end (look, delete)."""

    def __init__(
        self,
        settings: GcpBatchSettings,
        *,
        sleep: Callable[[float], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self._settings = settings
        self._sleep = sleep
        self._backoff = backoff
        self._poll: BatchClient | None = None

    @property
    def settings(self) -> GcpBatchSettings:
        """What the lane was built from."""
        return self._settings

    @property
    def name(self) -> str:
        """The lane's name."""
        return self._settings.name

    @property
    def manual_only(self) -> bool:
        """True if this lane is only used when pinned."""
        return self._settings.manual_only

    @property
    def price_per_gpu_hour(self) -> float:
        """What one GPU-hour costs here (the lane's required price)."""
        return float(self._settings.price_per_gpu_hour)

    @property
    def queue_timeout_seconds(self) -> float | None:
        """How long a job may sit queued before it is deleted (None: no bound)."""
        return self._settings.queue_timeout_seconds

    def _connect(self, *, poll: bool) -> BatchClient:
        s = self._settings
        if poll:
            backoff, timeout = Backoff(attempts=1), POLL_TIMEOUT_SECONDS
        else:
            backoff, timeout = self._backoff or Backoff(), min(CALL_TIMEOUT_SECONDS, s.timeout_seconds)
        return BatchClient.connect(
            s.location,
            endpoint=s.api_endpoint,
            anonymous=s.api_endpoint is not None,
            backoff=backoff,
            sleep=self._sleep,
            timeout_seconds=timeout,
        )

    def _poller(self) -> BatchClient:
        if self._poll is None:
            self._poll = self._connect(poll=True)
        return self._poll

    def job_name(self, dispatch_id: str) -> str:
        """The full name of the dispatch's Batch job (``projects/P/locations/R/jobs/fsm-<dispatch id>``)."""
        return f"{self._settings.location.parent}/jobs/{job_id_for(dispatch_id)}"

    # ------------------------------------------------------------------ the handoff
    def command(self, dispatch_id: str, spec: JobSpec) -> tuple[str, ...]:
        """The handoff as journaled and shown: the create of the job it names (nothing runs it as a process)."""
        return (*_COMMAND, self.job_name(dispatch_id))

    def start(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, *, now: float) -> CreateHandoff:
        """Start the create in a thread and return at once. Its result: exit 0 with the job's name on stdout (made,
        or found made by an earlier try: a 409 whose labels are ours); the error's exit code and one line on stderr
        when refused (403, an invalid machine, no credentials: never retried); lost (None) when the API never
        answered and the job may exist."""
        words = self.command(dispatch_id, spec)
        handoff = CreateHandoff(words, started_at=now, timeout_seconds=self._settings.timeout_seconds)
        return handoff.begin(lambda: self._create(words, dispatch_id, spec, files))

    def adopt(self, dispatch_id: str, spec: JobSpec, files: HandoffFiles, was: Started) -> CreateHandoff:
        """The handoff a previous driver started: the create is made again, from the dispatch's journaled job. It is
        idempotent by the job's name, so this never makes a second job: a job the first create made answers 409,
        its labels are this dispatch's, and it is that job (ONE Batch job); one it never made is made now. Its
        timeout counts from this driver's first look."""
        words = self.command(dispatch_id, spec)
        handoff = CreateHandoff(words, started_at=None, timeout_seconds=self._settings.timeout_seconds)
        return handoff.begin(lambda: self._create(words, dispatch_id, spec, files))

    def _create(self, words: tuple[str, ...], dispatch_id: str, spec: JobSpec, files: HandoffFiles) -> HandoffResult:
        """The create's whole run (in the handoff's thread): never raises."""
        try:
            machine = machine_for(spec.gpus, self._settings.accelerator, self._settings.machine_type)
            script = (Path(spec.workdir) if spec.workdir else Path.cwd()) / spec.script_file
            try:
                text = script.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                why = getattr(exc, "strerror", None) or str(exc)
                raise LaneError(f"cannot read the job's script {script}: {why}; nothing was sent") from None
            request = BatchJobRequest(dispatch_id, self.name, text, spec.gpus, spec.time_limit_seconds)
            job = self._connect(poll=False).create(request, machine)
            result = HandoffResult(words, 0, job.name, "")
        except BatchUnavailable as exc:
            result = HandoffResult(words, None if exc.maybe_made else exc.exit_code, "", str(exc))
        except FellowsError as exc:
            result = HandoffResult(words, exc.exit_code, "", str(exc))
        except Exception as exc:  # a defect here must not leave the handoff hanging: the job may exist, look it up
            log.exception("gcp-batch create of %s failed unexpectedly", words[-1])
            result = HandoffResult(words, None, "", f"the create failed unexpectedly ({type(exc).__name__}: {exc})")
        _keep(files, result)
        return result

    def already_has(self, dispatch_id: str, spec: JobSpec) -> bool | None:
        """Get the dispatch's job by its name: True if the API has it (this dispatch's labels), False if it has no
        such job (or one that is not this dispatch's), None when the API could not be asked (one short try)."""
        try:
            job = self._poller().get(job_id_for(dispatch_id))
        except FellowsError as exc:
            log.warning("dispatch %s: cannot tell whether GCP Batch has its job: %s", dispatch_id, exc)
            return None
        return job is not None and job.labels.get(LABEL_DISPATCH) == label_value(dispatch_id)

    def logs(self, dispatch_id: str, spec: JobSpec | None) -> LogsWay:
        """Where the job's logs are: Cloud Logging, by the filter Google documents for a Batch job (its task logs'
        ``logName`` and the job's ``uid``, read with one short get; when that fails, how to read the uid)."""
        project = self._settings.project
        job = job_id_for(dispatch_id)
        try:
            found = self._poller().get(job)
        except FellowsError as exc:
            log.info("dispatch %s: the uid of its Batch job could not be read: %s", dispatch_id, exc)
            found = None
        uid = (
            f'"{found.uid}"'
            if found is not None and found.uid
            else f"<`gcloud batch jobs describe {job} --project={project} --location={self._settings.region} "
            "--format=value(uid)`>"
        )
        return LogsWay(
            where=f"GCP Batch job {self.job_name(dispatch_id)} logs to Cloud Logging: `gcloud logging read "
            f"'logName=\"projects/{project}/logs/batch_task_logs\" labels.job_uid={uid}' --project={project}`"
        )

    # ------------------------------------------------------------------ following the paid job
    def look(self, dispatch_ids: Sequence[str]) -> dict[str, PaidLook]:
        """Where each dispatch's job stands, from ONE list call of the lane's jobs (one short try): a dispatch with
        no job in the list is GONE (deleted outside, or never made), a state this lane does not know UNKNOWN.
        Raises PaidLaneError (one line) when the list could not be read: the driver asks again next poll."""
        try:
            jobs = self._poller().jobs(self.name)
        except FellowsError as exc:
            raise PaidLaneError(str(exc)) from None  # the client's line names the lane, project and region
        by_id = {job.job_id: job for job in jobs}
        looks: dict[str, PaidLook] = {}
        for dispatch_id in dispatch_ids:
            job = by_id.get(job_id_for(dispatch_id))
            if job is None:
                looks[dispatch_id] = PaidLook(PaidStatus.GONE, f"GCP Batch has no job {job_id_for(dispatch_id)}")
            elif job.labels.get(LABEL_DISPATCH) != label_value(dispatch_id):
                looks[dispatch_id] = PaidLook(PaidStatus.UNKNOWN, f"job {job.job_id} is not this dispatch's")
            else:
                status = STATUS_OF.get(job.state, PaidStatus.UNKNOWN)
                note = job.note if status is not PaidStatus.UNKNOWN else f"state {job.state}: {job.note}".strip()
                looks[dispatch_id] = PaidLook(status, note, job.run_seconds)
        return looks

    def delete(self, dispatch_id: str) -> None:
        """Delete the dispatch's job (one call: it goes DELETION_IN_PROGRESS, then away); a job already gone (404)
        is fine. Raises PaidLaneError (one line) when the API did not take it."""
        try:
            self._poller().delete(job_id_for(dispatch_id))
        except FellowsError as exc:
            raise PaidLaneError(str(exc)) from None  # the client's line names the job, project and region


def _keep(files: HandoffFiles, result: HandoffResult) -> None:
    """Write the create's answer where a handoff's output is kept (the files the driver prepared), for the user."""
    if not files.directory.is_dir():
        return
    try:
        files.stdout.write_text(result.stdout + ("\n" if result.stdout else ""), encoding="utf-8")
        files.stderr.write_text(result.stderr + ("\n" if result.stderr else ""), encoding="utf-8")
    except OSError as exc:
        log.warning("cannot keep the gcp-batch handoff's output in %s: %s", files.directory, exc.strerror)


class GcpBatchKind:
    """The gcp-batch kind, as the registry knows it: ``[lanes.<name>] kind = "gcp-batch"``."""

    name = KIND

    def parse(self, name: str, table: Mapping[str, Any]) -> GcpBatchSettings:
        """The lane's settings from its table."""
        return GcpBatchSettings.from_table(name, table)

    def table(self, settings: GcpBatchSettings) -> dict[str, Any]:
        """Every key of the table, as the journal keeps it with each dispatch (None: unset)."""
        return {key: getattr(settings, key) for key in KEYS}

    def build(self, settings: GcpBatchSettings, *, state_dir: Path) -> GcpBatchLane:
        """The lane (no I/O: its clients connect when first used)."""
        return GcpBatchLane(settings)


GCP_BATCH = GcpBatchKind()
"""The gcp-batch kind's entry in lanes/registry.py."""
