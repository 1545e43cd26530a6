"""An in-memory Scheduler: the shipped fake of the cluster port, for unit tests and for users' own tests.

Jobs change only when a test says so (``start``, ``set_pending``, ``end``, ``forget``) or when
``schedule()`` applies a small model of per-QoS, per-user GPU caps. It never replaces the real SLURM in
integration tests; it counts every call so tests can assert on scheduler load.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence

import attrs

from fellows_fsm.clock import Clock, SystemClock
from fellows_fsm.errors import QosRejected, SchedulerUnreachable, SubmitRejected
from fellows_fsm.scheduler.port import COULD_NOT_TELL, JobEnd, JobSpec, Observation, Phase, Workload

__all__ = ["FakeJob", "FakeScheduler"]

_ENDED_UNSTARTED = "CANCELLED"


# Mutable on purpose: the fake's jobs change state as the test or schedule() moves them.
@attrs.define(eq=False)
class FakeJob:
    """A job held by the fake scheduler."""

    job_id: str
    spec: JobSpec
    qos: str
    token: str
    user: str
    submitted_at: float
    deadline: float | None = None
    state: str = "PENDING"
    reason: str | None = None
    start_time: float | None = None
    submitted_qos: str = ""
    """The QoS the job was queued on (``qos`` changes when it is moved in place)."""
    expected_start: float | None = None
    """The scheduler's start estimate while pending (squeue's StartTime); None: N/A."""
    start_on_cancel: bool = False
    """Start this job just before the next cancel lands (the late-start race)."""
    forgotten: bool = False
    exit_code: int | None = None
    """How it exited (``end``); None: no exit code (never ran, or SLURM gives none)."""
    end_time: float | None = None
    restarts: int = 0
    """How often it was requeued after it started (``requeue``): a requeued job reads started, as squeue's
    RestartCnt makes the real port read it."""

    @property
    def phase(self) -> Phase:
        """The job's state as the lifecycle machine reads it."""
        if self.forgotten:
            return Phase.UNKNOWN
        if self.state == "PENDING":
            return Phase.STARTED if self.restarts else Phase.PENDING
        if self.start_time is not None:
            return Phase.STARTED
        return Phase.GONE

    @property
    def ended(self) -> bool:
        """Did the job end after it started (accounting would have its end)?"""
        return self.start_time is not None and self.state not in ("PENDING", "RUNNING")

    def observe(self, *, accounting: bool = True) -> Observation:
        """This job as an Observation (``accounting`` False: sacct could not be asked, so no end is known)."""
        if self.forgotten:
            return Observation(self.job_id, Phase.UNKNOWN, state="" if accounting else COULD_NOT_TELL)
        token = self.token or None
        end = None
        if self.ended and accounting:
            ran = (self.end_time or 0.0) - (self.start_time or 0.0)
            end = JobEnd(self.state, self.exit_code, max(ran, 0.0), self.spec.gpus, self.end_time)
        return Observation(
            job_id=self.job_id,
            phase=self.phase,
            state=self.state,
            reason=self.reason if self.state == "PENDING" else None,
            qos=self.qos,
            start_time=self.start_time,
            token=token,
            expected_start=self.expected_start if self.state == "PENDING" else None,
            end=end,
        )


class FakeScheduler:
    """A Scheduler held in memory.

    ``granted`` limits the QoS a submit may name (None grants any). ``qos_gpu_caps`` and ``total_gpus``
    feed ``schedule()``: pending jobs start in priority order while they fit under the node's GPUs and
    under their QoS's per-user GPU cap, else they get SLURM's reason (QOSMaxGRESPerUser or Resources).
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        granted: Sequence[str] | None = None,
        qos_priority: Mapping[str, int] | None = None,
        qos_gpu_caps: Mapping[str, int] | None = None,
        total_gpus: int | None = None,
        user: str = "me",
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.granted = None if granted is None else frozenset(granted)
        self.qos_priority = dict(qos_priority or {})
        self.qos_gpu_caps = dict(qos_gpu_caps or {})
        self.total_gpus = total_gpus
        self.user = user
        self.jobs: dict[str, FakeJob] = {}
        self.calls: Counter[str] = Counter()
        self.unreachable = False
        """While True, every call raises SchedulerUnreachable (a controller outage)."""
        self.unreachable_delivered = True
        """Whether an outage's calls may have reached the controller (False: a refused connection, nothing done)."""
        self.accounting_down = False
        """While True, accounting (sacct) cannot be asked: no end is known, a lost job is "could not tell"."""
        self.past: Workload | None = None
        """What ``history`` answers (None: an empty history read now); a test sets it."""
        self._ids = itertools.count(1000)
        self._submit_failures: list[Exception] = []

    # ----------------------------------------------------------------- the port
    def submit(self, spec: JobSpec, *, qos: str, token: str, deadline: float | None = None) -> str:
        """Queue the job PENDING with reason None; refuses an ungranted QoS like sbatch does."""
        self.calls["submit"] += 1
        self._check_reachable()
        if self._submit_failures:
            raise self._submit_failures.pop(0)
        if self.granted is not None and qos not in self.granted:
            raise QosRejected(qos, f"sbatch refused QoS {qos!r}: Invalid qos specification")
        return self.add_job(spec, qos=qos, token=token, deadline=deadline, user=self.user).job_id

    def observe(self, job_ids: Sequence[str]) -> Mapping[str, Observation]:
        """Every listed job in one call; unknown ids map to UNKNOWN."""
        self.calls["observe"] += 1
        self._check_reachable()
        jobs = [self.jobs.get(job_id) for job_id in job_ids]
        if any(job is None or job.forgotten or job.ended for job in jobs):
            self.calls["sacct"] += 1  # the real port's one batched sacct for the jobs squeue shows ended or lost
        up = not self.accounting_down
        unknown = Observation("", Phase.UNKNOWN, state="" if up else COULD_NOT_TELL)
        return {
            job_id: job.observe(accounting=up) if job is not None else attrs.evolve(unknown, job_id=job_id)
            for job_id, job in zip(job_ids, jobs, strict=True)
        }

    def cancel_if_pending(self, job_ids: Sequence[str], *, read_back: bool = True) -> Mapping[str, Observation]:
        """Cancel only pending jobs, then read them back (a job flagged ``start_on_cancel`` starts first)."""
        self.calls["cancel_if_pending"] += 1
        self._check_reachable()
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is None or job.forgotten:
                continue  # a job the controller lost is not there to cancel (nor to start)
            if job.start_on_cancel and job.state == "PENDING":
                self.start(job_id)
            if job.state == "PENDING":
                job.state = _ENDED_UNSTARTED
                job.reason = None
        if not read_back:
            # What the cancel itself proves, as the real port reports it: the jobs it removed while pending.
            return {
                job_id: job.observe()
                for job_id in job_ids
                if (job := self.jobs.get(job_id)) is not None and job.state == _ENDED_UNSTARTED and not job.forgotten
            }
        return {
            job_id: self.jobs[job_id].observe() if job_id in self.jobs else Observation(job_id, Phase.UNKNOWN)
            for job_id in job_ids
        }

    def change_qos(self, job_id: str, qos: str) -> bool:
        """Move a pending job to ``qos`` (same id), like ``scontrol update``; False once it is not pending."""
        self.calls["change_qos"] += 1
        self._check_reachable()
        if self.granted is not None and qos not in self.granted:
            raise QosRejected(qos, f"scontrol refused QoS {qos!r}: Invalid qos specification")
        job = self.jobs.get(job_id)
        if job is None or job.state != "PENDING" or job.forgotten:
            return False
        if job.start_on_cancel:
            self.start(job_id)  # the late-start race: it starts just before the move lands
            return False
        job.qos = qos
        job.reason = None
        return True

    def cancel(self, job_ids: Sequence[str]) -> None:
        """Cancel the jobs whatever their state; ended or unknown jobs are left as they are."""
        self.calls["cancel"] += 1
        self._check_reachable()
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state in ("PENDING", "RUNNING"):
                self.end(job_id, "CANCELLED")

    def find_by_token(self, token: str) -> Observation | None:
        """The newest job tagged with ``token``, or None."""
        self.calls["find_by_token"] += 1
        self._check_reachable()
        tagged = [j for j in self.jobs.values() if j.token == token and not j.forgotten]
        return tagged[-1].observe() if tagged else None

    def find_tokens(self, prefix: str) -> list[Observation]:
        """Every pending or running job whose token starts with ``prefix``."""
        self.calls["find_tokens"] += 1
        self._check_reachable()
        return [j.observe() for j in self.live_jobs(token_prefix=prefix)]

    # ----------------------------------------------------------------- controls for tests
    def workload(self, *, since: float) -> Workload:
        """The history a test set in ``past`` (an empty one read now if none); counted like every call."""
        self.calls["history"] += 1
        self._check_reachable()
        return self.past if self.past is not None else Workload(read_at=self.clock.now())

    def add_job(
        self,
        spec: JobSpec,
        *,
        qos: str,
        token: str = "",
        deadline: float | None = None,
        user: str | None = None,
    ) -> FakeJob:
        """Put a job in the queue directly (e.g. background load from another user)."""
        job = FakeJob(
            job_id=str(next(self._ids)),
            spec=spec,
            qos=qos,
            token=token,
            user=user or self.user,
            submitted_at=self.clock.now(),
            deadline=deadline,
            submitted_qos=qos,
        )
        self.jobs[job.job_id] = job
        return job

    def fail_next_submit(self, error: Exception | None = None) -> None:
        """Make the next submit raise ``error`` (default: a SubmitRejected)."""
        self._submit_failures.append(error or SubmitRejected("sbatch: error: fake refusal"))

    def start(self, job_id: str) -> None:
        """Start a pending job now."""
        job = self.jobs[job_id]
        job.state = "RUNNING"
        job.reason = None
        job.start_time = self.clock.now()

    def set_pending(self, job_id: str, reason: str | None, *, expected_start: float | None = None) -> None:
        """Keep a job pending with the given reason and start estimate (None: SLURM shows N/A)."""
        job = self.jobs[job_id]
        job.state = "PENDING"
        job.reason = reason
        job.expected_start = expected_start

    def end(self, job_id: str, state: str = "COMPLETED", *, exit_code: int | None = None) -> None:
        """End a job with a final SLURM state (COMPLETED after running; CANCELLED or DEADLINE unstarted) and its
        exit code (default: 0 for COMPLETED, none otherwise)."""
        job = self.jobs[job_id]
        job.state = state
        job.reason = None
        job.exit_code = exit_code if exit_code is not None or state != "COMPLETED" else 0
        job.end_time = self.clock.now()

    def requeue(self, job_id: str) -> None:
        """Put a running job back in the queue, as ``scontrol requeue`` does: pending again, started once."""
        job = self.jobs[job_id]
        job.state, job.reason, job.restarts = "PENDING", "BeginTime", job.restarts + 1

    def forget(self, job_id: str) -> None:
        """Make the scheduler lose track of a job (purged from every record): it reads UNKNOWN, and as for a real
        controller that lost a job, it never runs (slurmctld kills jobs it does not know when their node registers)."""
        self.jobs[job_id].forgotten = True

    def live_jobs(self, *, token_prefix: str = "") -> list[FakeJob]:
        """Jobs that are pending or running, optionally only those whose token starts with a prefix."""
        return [
            j
            for j in self.jobs.values()
            if j.state in ("PENDING", "RUNNING") and j.token.startswith(token_prefix) and not j.forgotten
        ]

    def schedule(self) -> list[str]:
        """Start every pending job that fits, highest QoS priority first; return the ids started.

        Jobs past their ``deadline`` end with DEADLINE, as slurmctld would drop them.
        """
        now = self.clock.now()
        for job in self.jobs.values():
            if job.state == "PENDING" and job.deadline is not None and now >= job.deadline:
                self.end(job.job_id, "DEADLINE")
        used_total = sum(j.spec.gpus for j in self.jobs.values() if j.state == "RUNNING")
        used: Counter[tuple[str, str]] = Counter()
        for j in self.jobs.values():
            if j.state == "RUNNING":
                used[(j.user, j.qos)] += j.spec.gpus
        pending = sorted(
            (j for j in self.jobs.values() if j.state == "PENDING" and not j.forgotten),
            key=lambda j: (-self.qos_priority.get(j.qos, 0), j.submitted_at, int(j.job_id)),
        )
        started: list[str] = []
        for job in pending:
            cap = self.qos_gpu_caps.get(job.qos)
            if cap is not None and used[(job.user, job.qos)] + job.spec.gpus > cap:
                job.reason = "QOSMaxGRESPerUser"
                continue
            if self.total_gpus is not None and used_total + job.spec.gpus > self.total_gpus:
                job.reason = "Resources"
                continue
            self.start(job.job_id)
            used_total += job.spec.gpus
            used[(job.user, job.qos)] += job.spec.gpus
            started.append(job.job_id)
        return started

    def _check_reachable(self) -> None:
        if self.unreachable:
            raise SchedulerUnreachable(
                "fake scheduler: slurm_load_jobs error: Unable to contact slurm controller",
                delivered=self.unreachable_delivered,
            )
